// core/cache_give_back.h: which cached blocks an allocator at its cap gives back (CudaAllocator and VulkanMemory
// share the choice; their own tests check it on a GPU and on lavapipe).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/cache_give_back.h"

namespace kiln {
namespace {

TEST(CacheGiveBack, TheSmallestBlockThatCoversWhatIsMissingAlone) {
    const std::vector<int64_t> sizes{8, 32, 16, 4};
    EXPECT_EQ(blocks_to_give_back(sizes, 12), std::vector<size_t>{2});  // 16, not 32
    EXPECT_EQ(blocks_to_give_back(sizes, 16), std::vector<size_t>{2});  // exactly enough
    EXPECT_EQ(blocks_to_give_back(sizes, 1), std::vector<size_t>{3});   // 4
    EXPECT_EQ(blocks_to_give_back(sizes, 17), std::vector<size_t>{1});  // 32
}

TEST(CacheGiveBack, ElseTheLargestUntilTheyCoverIt) {
    const std::vector<int64_t> sizes{8, 32, 16, 4};
    EXPECT_EQ(blocks_to_give_back(sizes, 40), (std::vector<size_t>{1, 2}));     // 32 + 16
    EXPECT_EQ(blocks_to_give_back(sizes, 56), (std::vector<size_t>{1, 2, 0}));  // 32 + 16 + 8
    EXPECT_EQ(blocks_to_give_back(sizes, 100), (std::vector<size_t>{1, 2, 0, 3}));  // all, still short
    EXPECT_TRUE(blocks_to_give_back({}, 8).empty());
}

}  // namespace
}  // namespace kiln
