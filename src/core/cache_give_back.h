// Which cached blocks an allocator at its cap (--vram) gives back to make room for a request: the smallest one that
// covers what is missing by itself, else the largest ones until they do (or all of them, where even that is short).
// The rest stay cached for the sizes that use them: giving the whole cache back made every later request of a step
// allocate again after a device-wide wait (session 27, docs/MEMORY.md). CudaAllocator and VulkanMemory share it.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

namespace kiln {

// Indices into `sizes` (the cached blocks' bytes) to give back, for `missing` bytes (> 0) of room.
inline std::vector<size_t> blocks_to_give_back(const std::vector<int64_t>& sizes, int64_t missing) {
    std::vector<size_t> order(sizes.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sizes[a] > sizes[b]; });
    size_t covering = order.size();  // the smallest that covers `missing` alone
    for (size_t i = 0; i < order.size() && sizes[order[i]] >= missing; ++i) covering = i;
    if (covering < order.size()) return {order[covering]};
    size_t count = 0;
    for (int64_t freed = 0; count < order.size() && freed < missing; ++count) freed += sizes[order[count]];
    order.resize(count);
    return order;
}

}  // namespace kiln
