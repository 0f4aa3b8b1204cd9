// `kiln plan` and `--memory` through the kiln program: the plan names each stage's predicted resident set, a
// budget too small is one error line naming the smallest that would do, and a bad size is refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/cli_expectations.h"
#include "cli/run_process.h"
#include "cli/test_files.h"
#include "io/safetensors.h"

using namespace kiln::test;

namespace {

const std::string kSd15 = std::string(KILN_TEST_DATA) + "/sd15-mini/sd15-mini.safetensors";

}  // namespace

TEST(MemoryBudgetCli, PlanPrintsEachStage) {
    const ProcessResult r = run_kiln({"plan", "-m", kSd15, "-W", "64", "-H", "64"});
    expect_success(r);
    for (const char* line : {"no budget", "text_encode: ", "denoise: ", "vae_decode: ", "predicted peak: "})
        EXPECT_NE(r.out.find(line), std::string::npos) << line << " missing from:\n" << r.out;
}

TEST(MemoryBudgetCli, TooSmallABudgetIsOneErrorLine) {
    TempDir tmp;
    expect_one_error_line(run_kiln({"plan", "-m", kSd15, "-W", "64", "-H", "64", "--memory", "1M"}),
                          {"memory budget of 1 MiB is too small", "(--memory "});
    expect_one_error_line(run_kiln({"txt2img", "-m", kSd15, "-p", "a red circle", "-W", "64", "-H", "64", "--steps",
                                    "1", "--device", "cpu", "-o", tmp.file("x.png"), "--memory", "1M", "--quiet"}),
                          {"memory budget of 1 MiB is too small"});
    expect_one_error_line(run_kiln({"plan", "-m", kSd15, "--memory", "lots"}), {"--memory 'lots' is not a size"});
}

TEST(MemoryBudgetCli, VramIsForGpusAndMemoryForTheCpu) {
    TempDir tmp;
    expect_one_error_line(run_kiln({"txt2img", "-m", kSd15, "-p", "a red circle", "-W", "64", "-H", "64", "--steps",
                                    "1", "--device", "cpu", "-o", tmp.file("x.png"), "--vram", "1G", "--quiet"}),
                          {"--vram bounds a GPU's memory"});
    expect_one_error_line(run_kiln({"bench", "--suite", "unet", "--device", "cpu", "--vram", "many"}),
                          {"--vram 'many' is not a size"});
}

// On Vulkan the plan's UNet call and whole decode are run dry through the backend's ops (docs/MEMORY.md), and a
// placement that moves weights says how many bytes and, at the upload rate timed now, how long. The leanest plan
// streams the UNet: its budget is the one the error for a budget too small names.
TEST(MemoryBudgetCli, VulkanPlanIsDerivedAndCostsItsUploads) {
    if (!vulkan_or_skip()) return;
    const std::vector<std::string> plan = {"plan", "-m", kSd15, "--device", "vulkan", "-W", "512", "-H", "512"};
    std::vector<std::string> args = plan;
    args.insert(args.end(), {"--vram", "1M"});
    const ProcessResult small = run_kiln(args);
    expect_one_error_line(small, {"--vram "});
    const size_t at = small.err.find("(--vram ");
    ASSERT_NE(at, std::string::npos) << small.err;
    const std::string least = small.err.substr(at + 8, small.err.find(')', at) - at - 8);
    args = plan;
    args.insert(args.end(), {"--vram", least});
    const ProcessResult r = run_kiln(args);
    expect_success(r);
    for (const char* line : {"UNet's blocks streamed", "a UNet call run dry through the backend's ops",
                             "the decode run dry", "fitting uploads weights again: ", " each UNet call", " GB/s ("})
        EXPECT_NE(r.out.find(line), std::string::npos) << line << " missing from:\n" << r.out;
}

// Past about 2 million output pixels a Vulkan convolution exceeds the driver's workgroup grid (65535 groups of 32
// pixels; the VAE's last convolutions at 1536x1536): the whole decode cannot run there, so its dry run gives no
// figure and the plan keeps the estimate (the decode itself falls back to bands, vae_tiling.cpp), rather than the
// plan failing with the convolution's error.
TEST(MemoryBudgetCli, VulkanPlanPastTheWorkgroupGridKeepsTheEstimate) {
    if (!vulkan_or_skip()) return;
    const ProcessResult r = run_kiln({"plan", "-m", kSd15, "--device", "vulkan", "-W", "1536", "-H", "1536", "--vram", "1G"});
    expect_success(r);
    EXPECT_NE(r.out.find("a UNet call run dry through the backend's ops"), std::string::npos) << r.out;
    const size_t decode = r.out.find("vae_decode: ");
    ASSERT_NE(decode, std::string::npos) << r.out;
    EXPECT_NE(r.out.find("estimated", decode), std::string::npos) << r.out;
}

// kiln plan reads the prompt and LoRA options as txt2img; a missing LoRA is one error line.
TEST(MemoryBudgetCli, PlanCountsAndPartsAndLoraMerges) {
    TempDir tmp;
    const std::string m = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_out_0";
    kiln::write_safetensors(tmp.file("grain.safetensors"),
                            {{m + ".lora_down.weight", kiln::Tensor({2, 16})}, {m + ".lora_up.weight", kiln::Tensor({16, 2})}});
    for (const auto& [args, line] : std::vector<std::pair<std::vector<std::string>, std::string>>{
             {{"-p", "a"}, "UNet calls: 2 rows (2 an image"},
             {{"-p", "a AND b AND c", "--batch-size", "2"}, "UNet calls: 8 rows (4 an image"},
             {{"--lora", tmp.file("grain.safetensors")}, "LoRA merges (from the files' headers): 1 weights"},
             {{"-p", "<lora:grain:0.8>", "--lora-dir", tmp.path().string()}, "LoRA merges (from the files' headers): 1"}}) {
        std::vector<std::string> all = {"plan", "-m", kSd15, "-W", "64", "-H", "64"};
        all.insert(all.end(), args.begin(), args.end());
        const ProcessResult r = run_kiln(all);
        expect_success(r);
        EXPECT_NE(r.out.find(line), std::string::npos) << r.out;
    }
    expect_one_error_line(run_kiln({"plan", "-m", kSd15, "--lora", tmp.file("missing")}), {"missing"});
}

// kiln plan takes --weights as txt2img does: quantized at load, the demo model's text encoder holds fewer bytes on
// the device (its linears in 4.5-bit blocks against 16 bits); a format it does not know is one error line.
TEST(MemoryBudgetCli, PlanTakesTheWeightsFormat) {
    expect_one_error_line(run_kiln({"plan", "-m", kSd15, "--weights", "q9"}), {"--weights: q9 not in {"});
    if (!vulkan_or_skip()) return;
    auto text_encoder_mib = [](const std::vector<std::string>& extra) {
        std::vector<std::string> args = {"plan", "-m", KILN_DEMO_MODEL, "--device", "vulkan", "-W", "256", "-H", "256"};
        args.insert(args.end(), extra.begin(), extra.end());
        const ProcessResult r = run_kiln(args);
        expect_success(r);
        const std::string key = "text_encode: ";
        const size_t at = r.out.find(key);
        EXPECT_NE(at, std::string::npos) << r.out;
        return at == std::string::npos ? -1 : std::stoi(r.out.substr(at + key.size()));
    };
    const int f16 = text_encoder_mib({});
    const int q4 = text_encoder_mib({"--weights", "q4_K"});
    EXPECT_GT(f16, 0);
    EXPECT_GT(q4, 0);
    EXPECT_LT(q4, f16);
}
