// The process's resident set as Linux reports it (VmRSS), for tests of areas below src/runtime (whose
// process_rss_bytes says the same) that check which file pages a load leaves resident.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>

namespace kiln::test {

// One "Name:   N kB" line of /proc/self/status in bytes, or -1 where there is none.
inline int64_t status_bytes(const std::string& field) {
    std::ifstream f("/proc/self/status");
    for (std::string line; std::getline(f, line);)
        if (line.rfind(field, 0) == 0) return std::stoll(line.substr(field.size())) * 1024;
    return -1;
}

inline int64_t resident_bytes() { return status_bytes("VmRSS:"); }

// Only the file-backed part (RssFile): pages of mapped files, whatever the heap allocator holds. A test
// that frees heap memory reads this, since freed blocks may stay resident (AddressSanitizer's quarantine
// keeps them all).
inline int64_t resident_file_bytes() { return status_bytes("RssFile:"); }

}  // namespace kiln::test
