// `kiln plan` and `--memory` through the kiln program: the plan names each stage's predicted resident set, a
// budget too small is one error line naming the smallest that would do, and a bad size is refused.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "cli/cli_expectations.h"
#include "cli/run_process.h"
#include "cli/test_files.h"
#include "io/safetensors.h"

using namespace kiln::test;

namespace {

const std::string kSd15 = std::string(KILN_TEST_DATA) + "/sd15-mini/sd15-mini.safetensors";

// The figure of `what` in a plan's line "  denoise: 123 MiB (mapped weights 4 MiB, activations 56 MiB)".
int mib_after(const std::string& out, const std::string& line, const std::string& what) {
    std::smatch m;
    const std::regex re("  " + line + ":.*" + what + " ([0-9]+) MiB");
    if (!std::regex_search(out, m, re)) {
        ADD_FAILURE() << line << " / " << what << " not in:\n" << out;
        return -1;
    }
    return std::stoi(m[1]);
}

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

// kiln plan reads the prompt as txt2img does: its AND parts are rows of each UNet call (the denoise stage's
// activations grow), a prompt without guidance has one row; --lora files and <lora:...> tags are counted from their
// headers; a LoRA that is not there is one error line.
TEST(MemoryBudgetCli, PlanCountsAndPartsAndLoraMerges) {
    auto plan = [](const std::vector<std::string>& extra) {
        std::vector<std::string> args = {"plan", "-m", kSd15, "-W", "512", "-H", "512"};
        args.insert(args.end(), extra.begin(), extra.end());
        const ProcessResult r = run_kiln(args);
        expect_success(r);
        return r.out;
    };
    const std::string none = plan({}), plain = plan({"-p", "a red circle"}), unguided = plan({"-p", "a", "--cfg-scale", "1"});
    const std::string composed = plan({"-p", "a red circle AND a blue square AND a green triangle"});
    EXPECT_NE(plain.find("UNet calls: 2 rows (1 image x 2: the negative and the prompt)"), std::string::npos) << plain;
    EXPECT_NE(unguided.find("UNet calls: 1 rows"), std::string::npos) << unguided;
    EXPECT_NE(composed.find("UNet calls: 4 rows (1 image x 4: the negative and 3 AND parts of the prompt)"),
              std::string::npos)
        << composed;
    EXPECT_EQ(mib_after(none, "denoise", "activations"), mib_after(plain, "denoise", "activations"));
    EXPECT_GT(mib_after(composed, "denoise", "activations"), mib_after(plain, "denoise", "activations"));
    EXPECT_LT(mib_after(unguided, "denoise", "activations"), mib_after(plain, "denoise", "activations"));
    EXPECT_EQ(plain.find("LoRA"), std::string::npos);

    TempDir tmp;
    const std::string module = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_out_0";
    kiln::Tensor down(kiln::Shape{2, 16}), up(kiln::Shape{16, 2});
    kiln::write_safetensors(tmp.file("grain.safetensors"),
                            {{module + ".lora_down.weight", down}, {module + ".lora_up.weight", up}}, kiln::DType::F16);
    const std::string merged = "LoRA merges (from the files' headers): 1 weights merged";
    EXPECT_NE(plan({"--lora", tmp.file("grain.safetensors") + ":0.5"}).find(merged), std::string::npos);
    EXPECT_NE(plan({"-p", "a castle <lora:grain:0.8>", "--lora-dir", tmp.path().string()}).find(merged), std::string::npos);
    expect_one_error_line(run_kiln({"plan", "-m", kSd15, "--lora", tmp.file("missing.safetensors")}),
                          {"missing.safetensors"});
    expect_one_error_line(run_kiln({"plan", "-m", kSd15, "-p", "a <lora:grain:1>"}), {"<lora:grain:1>", "--lora-dir"});
}
