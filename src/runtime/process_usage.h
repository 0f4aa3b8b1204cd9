// What the operating system says about the process, next to kiln's own figures: the resident set now
// and at its peak (Linux: VmRSS / VmHWM), which includes what kiln does not allocate itself (the
// program, libraries, OpenBLAS buffers, page-cache pages of mapped files), and the CPU time used,
// which tells a busy machine (other processes taking the cores) from a slow run.
#pragma once
#include <cstdint>

namespace kiln {

int64_t process_rss_bytes();       // 0 when the system does not say
int64_t process_peak_rss_bytes();  // since start or the last successful reset; 0 when unknown
// Restarts the peak from the present resident set (Linux >= 4.0, /proc/self/clear_refs). Returns
// false when the system does not allow it (the peak then stays the process's lifetime peak).
bool reset_process_peak_rss();

// Gives the heap's free memory back to the system (glibc's malloc_trim), so that what one phase of a
// run freed does not stay resident under the next phase's allocations: the kiln program keeps freed
// memory in the heap (GLIBC_TUNABLES, apps/kiln/main.cpp), which saves page faults within a phase.
// Returns how much the resident set shrank, in bytes (0 where the C library has no such call).
int64_t release_free_heap_memory();

// CPU time of all the process's threads so far, user + system, in seconds.
double process_cpu_seconds();

}  // namespace kiln
