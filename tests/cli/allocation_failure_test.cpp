// KILN_FAIL_ALLOCATION_AT through the kiln program, for a sweep of N: one "out of memory" error line and no file
// (no PNG, no temporary), or a recovery with the uninjected image. Never a crash (nor a leak, sanitizer build).
// On the CPU a failure inside the generation is a recovery: it runs again once with the leanest configuration,
// which gives the same image.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "cli/cli_expectations.h"
#include "cli/test_files.h"
#include "image/png.h"

using namespace kiln::test;

namespace {

const std::string kSd15 = std::string(KILN_TEST_DATA) + "/sd15-mini/sd15-mini.safetensors";

ProcessResult draw(const std::string& out, const std::vector<std::string>& more, const std::string& fail_at = "") {
    std::vector<std::string> args{"txt2img", "-m", kSd15, "-p", "a red circle", "-W", "64", "-H", "64", "--steps",
                                  "2", "--seed", "3", "-o", out, "--quiet"};
    args.insert(args.end(), more.begin(), more.end());
    if (!fail_at.empty()) ::setenv("KILN_FAIL_ALLOCATION_AT", fail_at.c_str(), 1);
    ProcessResult r = run_kiln(args);
    ::unsetenv("KILN_FAIL_ALLOCATION_AT");
    return r;
}

// Under the sanitizers (CI's second pass, where each kiln run takes several times as long) every third point of
// the stride and every 40th of the dense part (half of its points): the Release pass sweeps them all; this pass
// looks for memory errors on the failure paths, which the points left still reach.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kSparser = 3;
#else
constexpr int kSparser = 1;
#endif

// N = 1, 2, 4, ... to `last`, every `stride`th, and every 20th of [dense_from, dense_to] (under the sanitizers: fewer,
// above); below `sparse_below` (a GPU's loading, where every point recovers the same way: the model loads again off
// the device, a second run), N = 1, 4, 16, ... and every third stride. A run that recovered through the decode's
// bands may differ from the whole decode by rounding: in float32 (1.5 x 2e-5 of the image's scale,
// model_conformance_test.cpp) by at most one level of 255.
struct SweepCounts {
    int failed = 0, banded = 0, again = 0, reloaded = 0;  // again: the generation ran again; reloaded: the loading did
};
void sweep(SweepCounts& c, const std::vector<std::string>& options, const std::string& counted, int last, int stride,
           int dense_from = 0, int dense_to = -1, int sparse_below = 0) {
    TempDir tmp;
    expect_success(draw(tmp.file("want.png"), options));
    const std::vector<uint8_t> want = kiln::read_png(tmp.file("want.png")).pixels;
    std::vector<int> ns;
    for (int n = 1; n <= last; n *= n < sparse_below ? 4 : 2) ns.push_back(n);
    for (int n = 3; n <= last; n += stride * kSparser * (n < sparse_below ? 3 : 1)) ns.push_back(n);
    for (int n = dense_from; n <= dense_to; n += 20 * std::min(kSparser, 2)) ns.push_back(n);
    for (int n : ns) {
        TempDir dir;
        const ProcessResult r = draw(dir.file("out.png"), options, counted + std::to_string(n));
        ASSERT_TRUE(r.exited) << "N = " << n << ": " << r.describe();
        if (r.exit_code == 0) {
            const bool bands = r.err.find("decoding in bands") != std::string::npos;
            c.banded += bands;
            c.again += r.err.find("trying again") != std::string::npos;
            c.reloaded += r.err.find("while loading") != std::string::npos;
            const std::vector<uint8_t> got = kiln::read_png(dir.file("out.png")).pixels;
            ASSERT_EQ(got.size(), want.size());
            int most = 0;
            for (size_t i = 0; i < got.size(); ++i) most = std::max(most, std::abs(int(got[i]) - int(want[i])));
            EXPECT_LE(most, bands ? 1 : 0) << "N = " << n;
        } else {
            ++c.failed;
            expect_one_error_line(r, {"out of memory", "KILN_FAIL_ALLOCATION_AT"});
            EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "N = " << n << " left a file";
        }
    }
    std::printf("[ allocation failures ] %s: %d of %zu runs failed cleanly, %d recovered by bands, %d by running "
                "again, %d by loading again\n", counted.c_str(), c.failed, ns.size(), c.banded, c.again, c.reloaded);
    if (dense_to > 0) EXPECT_GT(c.banded, 0) << "no N fell in the VAE decode: move the dense part to its allocations";
}

}  // namespace

// The CPU run makes about 1960 host tensors.
// Those of the loading fail; those of the generation recover.
TEST(AllocationFailureCli, CpuRunsFailCleanlyOrRecover) {
    SweepCounts c;
    sweep(c, {"--device", "cpu"}, "cpu:", 4096, 137);
    EXPECT_GT(c.failed, 0) << "no injected failure was reached";
    EXPECT_GT(c.again, 0) << "no N fell in the generation";
}

// Vulkan's only, fp32: the loading's first (recovered: the model loads again with its weights off the device, under
// --vram auto), ~1440 in the UNet's first call (recovered by generate(): the weights leave the device in place and
// the generation runs again under --vram auto), then its recording (recovered: it runs
// eagerly), then the whole decode's, ~2060-2144 (recovered by bands). Without --vram every failure recovers.
TEST(AllocationFailureCli, VulkanRunsFailCleanlyOrRecover) {
    if (!vulkan_or_skip()) return;
    SweepCounts c;
    sweep(c, {"--device", "vulkan", "--precision", "fp32"}, "vulkan:", 2304, 97, 2040, 2160, 1400);
    EXPECT_GT(c.reloaded, 0) << "no N fell in the loading";
    EXPECT_GT(c.again, 0) << "no N fell in the UNet's first call";
}

TEST(AllocationFailureCli, BadSettingAndVramAuto) {
    TempDir tmp;
    expect_one_error_line(draw(tmp.file("x.png"), {"--device", "cpu"}, "often"), {"KILN_FAIL_ALLOCATION_AT=often"});
    expect_one_error_line(run_kiln({"plan", "-m", kSd15, "--device", "cpu", "--vram", "auto"}), {"--vram bounds a GPU"});
    if (!vulkan_or_skip()) return;
    const ProcessResult plan = run_kiln({"plan", "-m", kSd15, "--device", "vulkan", "--vram", "auto"});
    expect_success(plan);
    EXPECT_NE(plan.out.find("--vram auto: "), std::string::npos) << plan.out;
    const ProcessResult run = draw(tmp.file("x.png"), {"--device", "vulkan", "--vram", "auto"});
    expect_success(run);
    EXPECT_NE(run.err.find("kiln: --vram auto: "), std::string::npos) << run.err;
}
