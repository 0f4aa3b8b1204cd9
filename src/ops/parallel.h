// How the ops spread loops over OpenMP threads.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace kiln::ops::detail {

// Below this many elements of work a fork/join costs more than it saves.
constexpr int64_t kParallelMinWork = 1 << 15;

// Whether a loop of n items touching work_per_item elements each is worth OpenMP threads.
inline bool worth_threads(int64_t n, int64_t work_per_item) {
    return n > 1 && omp_get_max_threads() > 1 && n * std::max<int64_t>(work_per_item, 1) >= kParallelMinWork;
}

// Items per dynamically scheduled chunk: chunks hold 4K..64K elements, about 4 per thread.
inline int64_t chunk_items(int64_t n, int64_t work_per_item) {
    work_per_item = std::max<int64_t>(work_per_item, 1);
    const int64_t total = n * work_per_item;
    const int64_t chunk_work = std::clamp<int64_t>(total / (int64_t(omp_get_max_threads()) * 4), 1 << 12, 1 << 16);
    return std::max<int64_t>(1, chunk_work / work_per_item);
}

// Runs body(begin, end) over the items [0, n) on OpenMP threads, in chunks handed out dynamically: a
// thread that gets descheduled (a busy machine, OpenBLAS's workers still spinning after a sgemm) then
// holds up one chunk, not a fixed 1/threads share of the op. work_per_item is the number of elements
// an item touches. Call outside parallel regions.
template <class Body>
void parallel_for(int64_t n, int64_t work_per_item, Body&& body) {
    if (n <= 0) return;
    if (!worth_threads(n, work_per_item)) {
        body(int64_t(0), n);
        return;
    }
    const int64_t grain = chunk_items(n, work_per_item);
    const int64_t chunks = (n + grain - 1) / grain;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t c = 0; c < chunks; ++c) body(c * grain, std::min(n, (c + 1) * grain));
}

}  // namespace kiln::ops::detail
