// release_free_heap_memory: heap memory freed in the middle of the heap (so not trimmed on free) is
// resident until the call, and leaves the resident set with it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "runtime/process_usage.h"

namespace kiln {
namespace {

TEST(ProcessUsage, ReleaseFreeHeapMemoryGivesFreedBlocksBack) {
#if defined(__SANITIZE_ADDRESS__) || !defined(__GLIBC__)
    GTEST_SKIP() << "glibc's allocator only (AddressSanitizer keeps freed memory in quarantine)";
#else
    // 512 blocks of 64 KiB (32 MiB) come from the heap (below glibc's smallest mmap threshold); a block
    // made after them keeps them from being the top of the heap, which free() would trim by itself.
    constexpr size_t kBlock = 64 << 10;
    std::vector<void*> blocks;
    for (int i = 0; i < 512; ++i) {
        blocks.push_back(std::malloc(kBlock));
        std::memset(blocks.back(), 1, kBlock);  // resident
    }
    void* above = std::malloc(kBlock);
    std::memset(above, 1, kBlock);
    for (void* b : blocks) std::free(b);
    const int64_t released = release_free_heap_memory();
    std::free(above);
    // Nearly all of the 32 MiB: malloc_trim gives back whole free pages, less a page per chunk edge.
    EXPECT_GE(released, int64_t(30) << 20);
#endif
}

}  // namespace
}  // namespace kiln
