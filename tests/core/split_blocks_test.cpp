// SplitBlocks (core/split_blocks.h): best fit within a pool, cuts that leave a free rest only where it is worth
// keeping, merges with both neighbours of the same segment (never across segments), and whole free segments.
#include "core/split_blocks.h"

#include <gtest/gtest.h>

#include <string>

#include "kiln/error.h"

namespace kiln {
namespace {

constexpr int64_t MiB = int64_t(1) << 20;
const auto any_pool = [](int) { return true; };

TEST(SplitBlocks, ARequestIsCutFromTheSmallestFreeBlockThatHoldsIt) {
    SplitBlocks s(2 * MiB);
    const uint64_t a = 1 << 30, b = uint64_t(1) << 32;
    s.add_segment(0, a, 40 * MiB, 40 * MiB);
    s.add_segment(0, b, 24 * MiB, 24 * MiB);
    EXPECT_EQ(s.release(a).bytes, 40 * MiB);
    EXPECT_EQ(s.release(b).bytes, 24 * MiB);
    // 16 MiB: the 24 MiB block is the smallest that holds it; 8 MiB stay free behind it.
    EXPECT_EQ(s.take(0, 16 * MiB), b);
    EXPECT_EQ(s.take(0, 8 * MiB), b + 16 * MiB);
    // 30 MiB: only the 40 MiB block holds it; the 10 MiB left serve the next request.
    EXPECT_EQ(s.take(0, 30 * MiB), a);
    EXPECT_EQ(s.take(0, 10 * MiB), a + 30 * MiB);
    EXPECT_EQ(s.take(0, 1), 0u) << "nothing free is left";
    EXPECT_EQ(s.live_bytes(), 64 * MiB);
    EXPECT_EQ(s.segment_bytes(), 64 * MiB);
}

TEST(SplitBlocks, ASmallRestStaysWithTheBlock) {
    SplitBlocks s(2 * MiB);
    s.add_segment(0, 4096, 10 * MiB, 10 * MiB);
    s.release(4096);
    EXPECT_EQ(s.take(0, 9 * MiB), 4096u);  // 1 MiB left: not worth a block
    EXPECT_EQ(s.live_bytes(), 10 * MiB);
    EXPECT_EQ(s.take(0, 1), 0u);
    const SplitBlocks::Released r = s.release(4096);
    EXPECT_EQ(r.bytes, 10 * MiB);
    EXPECT_TRUE(r.segment_free);
}

TEST(SplitBlocks, FreedBlocksMergeWithBothNeighboursOfTheirSegmentOnly) {
    SplitBlocks s(MiB);
    const uint64_t a = 1000 * MiB, b = a + 12 * MiB;  // b's segment starts where a's ends: never merged with it
    s.add_segment(0, a, 12 * MiB, 4 * MiB);
    s.add_segment(0, b, 12 * MiB, 12 * MiB);
    const uint64_t second = s.take(0, 4 * MiB), third = s.take(0, 4 * MiB);
    ASSERT_EQ(second, a + 4 * MiB);
    ASSERT_EQ(third, a + 8 * MiB);
    EXPECT_EQ(s.release(b).bytes, 12 * MiB);  // free beside a's last block, of another segment
    EXPECT_FALSE(s.release(a).segment_free);
    EXPECT_FALSE(s.release(third).segment_free) << "b, free beside it, is another segment";
    EXPECT_EQ(s.take(0, 13 * MiB), 0u) << "a's last block and b's segment side by side are not one block";
    EXPECT_EQ(s.take(0, 12 * MiB), b);
    EXPECT_EQ(s.take(0, 5 * MiB), 0u) << "two free blocks of 4 MiB apart are not one of 8";
    const SplitBlocks::Released r = s.release(second);  // joins both
    EXPECT_TRUE(r.segment_free);
    EXPECT_EQ(r.segment, a);
    EXPECT_EQ(s.free_segments(any_pool).size(), 1u);
    EXPECT_EQ(s.take(0, 12 * MiB), a);
    s.release(a);
    s.release(b);
    EXPECT_EQ(s.live_bytes(), 0);
    EXPECT_EQ(s.free_segments(any_pool).size(), 2u);
}

TEST(SplitBlocks, PoolsKeepTheirBlocks) {
    SplitBlocks s(MiB);
    s.add_segment(1, 64 * MiB, 8 * MiB, 8 * MiB);
    s.release(64 * MiB);
    EXPECT_EQ(s.take(0, 4 * MiB), 0u);
    EXPECT_EQ(s.take(1, 4 * MiB), 64 * MiB);
    EXPECT_EQ(s.free_segments(any_pool).size(), 0u) << "half of it is live";
    s.release(64 * MiB);
    EXPECT_EQ(s.free_segments([](int pool) { return pool == 0; }).size(), 0u);
    ASSERT_EQ(s.free_segments([](int pool) { return pool == 1; }).size(), 1u);
}

TEST(SplitBlocks, AMovedPoolsBlocksServeTheOtherPool) {
    SplitBlocks s(MiB);
    s.add_segment(2, 32 * MiB, 8 * MiB, 4 * MiB);  // 4 MiB live, 4 free, of pool 2
    s.move_pool(2, 0);
    EXPECT_EQ(s.take(2, MiB), 0u);
    EXPECT_EQ(s.take(0, 4 * MiB), 36 * MiB) << "the free part moved";
    s.release(32 * MiB);  // the live part, freed after the move, is pool 0's too
    EXPECT_EQ(s.take(0, 4 * MiB), 32 * MiB);
    s.release(32 * MiB);
    s.release(36 * MiB);
    ASSERT_EQ(s.free_segments([](int pool) { return pool == 0; }).size(), 1u);
    EXPECT_EQ(s.live_bytes(), 0);
}

// A segment whose rest would be under the minimum is live whole, as a cut leaves it: 9 of 10 MiB live with a minimum
// of 2 leaves no 1 MiB free block, and the live block frees as 10 MiB.
TEST(SplitBlocks, ASegmentsShortRestIsLiveWithIt) {
    SplitBlocks s(2 * MiB);
    s.add_segment(0, 64 * MiB, 10 * MiB, 9 * MiB);
    EXPECT_EQ(s.live_bytes(), 10 * MiB);
    EXPECT_EQ(s.take(0, MiB), 0u);
    EXPECT_EQ(s.release(64 * MiB).bytes, 10 * MiB);
    s.add_segment(0, 128 * MiB, 10 * MiB, 8 * MiB);  // a rest of 2 MiB is kept free
    EXPECT_EQ(s.take(0, 2 * MiB), 136 * MiB);
}

TEST(SplitBlocks, OnlyWholeFreeSegmentsAreRemoved) {
    SplitBlocks s(MiB);
    s.add_segment(0, 8 * MiB, 8 * MiB, 2 * MiB);
    EXPECT_EQ(s.remove_segment(8 * MiB), 0) << "a block of it is live";
    EXPECT_EQ(s.remove_segment(9 * MiB), 0) << "not a segment";
    EXPECT_TRUE(s.is_live(8 * MiB));
    s.release(8 * MiB);
    EXPECT_FALSE(s.is_live(8 * MiB));
    EXPECT_EQ(s.release(8 * MiB).bytes, 0) << "freed twice";
    EXPECT_EQ(s.release(12345).bytes, 0) << "never given";
    EXPECT_EQ(s.remove_segment(8 * MiB), 8 * MiB);
    EXPECT_EQ(s.segment_bytes(), 0);
    EXPECT_EQ(s.take(0, MiB), 0u) << "its free blocks went with it";
    EXPECT_TRUE(s.segments().empty());
    EXPECT_EQ(s.live_bytes(), 0);
    try {
        s.add_segment(-1, 64 * MiB, MiB, MiB);
        ADD_FAILURE() << "a negative pool was taken";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    }
}

// KILN_CUDA_SPLIT_BLOCKS and KILN_VULKAN_SPLIT_BLOCKS: the backend's default when unset, 0, 1 or uncapped, naming the
// setting when wrong.
TEST(SplitBlocks, TheSettingIsZeroOneOrUncapped) {
    EXPECT_EQ(split_policy_setting("KILN_CUDA_SPLIT_BLOCKS", nullptr, SplitPolicy::WhileUncapped),
              SplitPolicy::WhileUncapped);
    EXPECT_EQ(split_policy_setting("KILN_CUDA_SPLIT_BLOCKS", "", SplitPolicy::Always), SplitPolicy::Always);
    EXPECT_EQ(split_policy_setting("KILN_CUDA_SPLIT_BLOCKS", "0", SplitPolicy::Always), SplitPolicy::Never);
    EXPECT_EQ(split_policy_setting("KILN_VULKAN_SPLIT_BLOCKS", "1", SplitPolicy::Never), SplitPolicy::Always);
    EXPECT_EQ(split_policy_setting("KILN_VULKAN_SPLIT_BLOCKS", "uncapped", SplitPolicy::Never),
              SplitPolicy::WhileUncapped);
    try {
        split_policy_setting("KILN_VULKAN_SPLIT_BLOCKS", "yes", SplitPolicy::Never);
        ADD_FAILURE() << "KILN_VULKAN_SPLIT_BLOCKS=yes was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
        EXPECT_NE(std::string(e.what()).find("KILN_VULKAN_SPLIT_BLOCKS=yes"), std::string::npos) << e.what();
    }
}

// Under WhileUncapped a request is cut only while the allocator has no cap.
TEST(SplitBlocks, WhileUncappedCutsOnlyWithoutACap) {
    EXPECT_TRUE(cuts_blocks(SplitPolicy::WhileUncapped, 0));
    EXPECT_FALSE(cuts_blocks(SplitPolicy::WhileUncapped, int64_t(1) << 30));
    EXPECT_TRUE(cuts_blocks(SplitPolicy::Always, int64_t(1) << 30));
    EXPECT_FALSE(cuts_blocks(SplitPolicy::Never, 0));
}

}  // namespace
}  // namespace kiln
