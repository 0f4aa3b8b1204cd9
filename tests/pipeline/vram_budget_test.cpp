// --vram auto's arithmetic (pipeline/vram_budget.h): the device's free memory plus what kiln holds, less
// max(512 MiB, 10% of the device), and an OutOfMemory error naming the figures when that leaves nothing.
#include <gtest/gtest.h>

#include <string>

#include "kiln/error.h"
#include "pipeline/vram_budget.h"

using namespace kiln;

namespace {
constexpr int64_t kMiB = int64_t(1) << 20, kGiB = kMiB << 10;
}

TEST(VramBudget, AutoIsTheFreeMemoryLessTheMargin) {
    EXPECT_EQ(vram_auto_margin(4 * kGiB), 512 * kMiB);  // 10% is 410 MiB: the floor holds
    EXPECT_EQ(vram_auto_margin(8 * kGiB), 8 * kGiB / 10);
    const VramBudget b = vram_auto_budget(3 * kGiB, 256 * kMiB, 4 * kGiB, "vulkan:0");
    EXPECT_TRUE(b.automatic);
    EXPECT_EQ(b.available, 3 * kGiB + 256 * kMiB);  // what kiln holds counts in the cap
    EXPECT_EQ(b.bytes, 3 * kGiB + 256 * kMiB - 512 * kMiB);
    EXPECT_EQ(b.describe("vulkan:0"), "--vram auto: 2816 MiB (3328 MiB available on vulkan:0 less a margin of 512 MiB)");
    VramBudget given;
    given.bytes = 3 * kGiB;
    EXPECT_EQ(given.describe("cuda:0"), "--vram 3072 MiB");
}

TEST(VramBudget, AutoWithNothingLeftIsOutOfMemoryNamingTheFigures) {
    try {
        (void)vram_auto_budget(300 * kMiB, 0, 4 * kGiB, "cuda:0");
        ADD_FAILURE() << "a budget was made of less than the margin";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory);
        const std::string what = e.what();
        for (const char* s : {"--vram auto", "cuda:0", "300 MiB", "512 MiB"})
            EXPECT_NE(what.find(s), std::string::npos) << s << " not in: " << what;
    }
}
