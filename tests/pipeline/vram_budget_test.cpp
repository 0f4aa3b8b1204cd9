// --vram auto's arithmetic (pipeline/vram_budget.h).
#include <gtest/gtest.h>

#include "kiln/error.h"
#include "pipeline/vram_budget.h"

using namespace kiln;

TEST(VramBudget, AutoIsTheFreeMemoryLessTheMargin) {
    constexpr int64_t kMiB = int64_t(1) << 20, kGiB = kMiB << 10;
    EXPECT_EQ(vram_auto_margin(4 * kGiB), 512 * kMiB);  // 10% is less: the floor
    EXPECT_EQ(vram_auto_margin(8 * kGiB), 8 * kGiB / 10);
    const VramBudget b = vram_auto_budget(3 * kGiB, 256 * kMiB, 4 * kGiB, "vulkan:0");
    EXPECT_EQ(b.bytes, 3 * kGiB + 256 * kMiB - 512 * kMiB);  // what kiln holds counts in the cap
    EXPECT_EQ(b.describe("vulkan:0"), "--vram auto: 2816 MiB (3328 MiB available on vulkan:0 less a margin of 512 MiB)");
    try {
        (void)vram_auto_budget(300 * kMiB, 0, 4 * kGiB, "cuda:0");
        ADD_FAILURE() << "a budget of less than the margin";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory);
        EXPECT_NE(std::string(e.what()).find("cuda:0 has 300 MiB"), std::string::npos) << e.what();
    }
}
