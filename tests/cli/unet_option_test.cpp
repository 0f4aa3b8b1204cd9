// --unet FILE through the kiln program (the loader's side: tests/models/unet_file_test.cpp): txt2img with the model's
// own UNet as a file alone gives the same PNG bytes as without it, and the quality suite measures it against the
// model's own UNet (no error at all); --unet without -m is an error; the file is left as it was, and `kiln info`
// names it for what it is. A diffusers folder's UNet (its weights file or its unet/ folder) gives the folder's image,
// and beside the single file, with a LoRA, the single file's image with that LoRA.
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
const std::string kPrefix = "model.diffusion_model.";
const std::string kSd15Folder = std::string(KILN_TEST_DATA) + "/sd15-mini/diffusers";
const std::string kSdxlFolder = std::string(KILN_TEST_DATA) + "/sdxl-mini/diffusers";

ProcessResult txt2img(TempDir& tmp, const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"txt2img", "-m", kSd15, "-p", "a red circle", "-W", "64", "-H", "64", "--steps", "2",
                                     "--seed", "3", "-o", tmp.file("out.png"), "--quiet", "--device", "cpu"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_kiln(args);
}

// sd15-mini's UNet alone, its keys without the prefix (ComfyUI-GGUF's layout), in float32.
void write_unet_alone(const std::string& path) {
    const kiln::SafetensorsFile src = kiln::SafetensorsFile::open(kSd15);
    std::vector<std::pair<std::string, kiln::Tensor>> tensors;
    for (const std::string& name : src.names())
        if (name.rfind(kPrefix, 0) == 0) tensors.emplace_back(name.substr(kPrefix.size()), src.load(name));
    kiln::write_safetensors(path, tensors, kiln::DType::F32);
}

// One kohya LoRA module, on an attention projection of sd15-mini's UNet (16 channels).
void write_unet_lora(const std::string& path) {
    auto values = [](kiln::Shape s) {
        kiln::Tensor t(s);
        for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = 0.1f * float(i % 5 - 2);
        return t;
    };
    const std::string m = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q";
    kiln::write_safetensors(path, {{m + ".lora_down.weight", values({2, 16})}, {m + ".lora_up.weight", values({16, 2})}},
                            kiln::DType::F16);
}

// txt2img's PNG bytes.
std::string image(TempDir& tmp, const std::string& model, const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"txt2img", "-m", model, "-p", "a red circle", "-W", "64", "-H", "64", "--steps", "2",
                                     "--seed", "3", "-o", tmp.file("image.png"), "--quiet", "--device", "cpu"};
    args.insert(args.end(), extra.begin(), extra.end());
    expect_success(run_kiln(args));
    return read_bytes(tmp.file("image.png"));
}

}  // namespace

TEST(UnetOption, TheModelsOwnUNetAloneGivesTheSameImage) {
    TempDir tmp;
    const std::string unet = tmp.file("unet.safetensors");
    write_unet_alone(unet);
    const FileSnapshot before = FileSnapshot::of(unet);
    expect_success(txt2img(tmp, {}));
    const std::string own = read_bytes(tmp.file("out.png"));
    expect_success(txt2img(tmp, {"--unet", unet}));
    EXPECT_EQ(read_bytes(tmp.file("out.png")), own) << "--unet of the model's own UNet changed the image";
    // The quality suite measures -m with --unet against -m alone: here the same UNet, so no error at all.
    const ProcessResult q = run_kiln({"bench", "-m", kSd15, "--unet", unet, "--suite", "quality", "-W", "64", "-H", "64",
                                      "--device", "cpu", "--seeds", "1", "-p", "a red circle", "--steps", "2"});
    expect_success(q);
    EXPECT_NE((q.out + q.err).find("PSNR mean inf dB"), std::string::npos) << q.out << q.err;
    EXPECT_TRUE(FileSnapshot::of(unet) == before) << "kiln modified the --unet file";
    expect_one_error_line(run_kiln({"bench", "--suite", "unet", "--unet", unet, "--device", "cpu"}), {"--unet", "-m"});
    // kiln info names the file for what it is, with the UNet's parameters (sd15-mini's: 827,476).
    const ProcessResult info = run_kiln({"info", unet});
    expect_success(info);
    EXPECT_NE(info.out.find("a UNet alone"), std::string::npos) << info.out;
    EXPECT_NE(info.out.find("--unet"), std::string::npos) << info.out;
    EXPECT_NE(info.out.find("unet            0.827476 M parameters in 684 tensors"), std::string::npos) << info.out;
}

TEST(UnetOption, ADiffusersUNetGivesTheModelsImage) {
    TempDir tmp;
    for (const std::string& folder : {kSd15Folder, kSdxlFolder}) {
        const std::string own = image(tmp, folder, {}), file = folder + "/unet/diffusion_pytorch_model.safetensors";
        EXPECT_EQ(image(tmp, folder, {"--unet", file}), own) << file;
        EXPECT_EQ(image(tmp, folder, {"--unet", folder + "/unet"}), own) << folder << "/unet";
    }
    // Beside the single file (whose UNet holds the same values), a LoRA applies to it as to the file's own UNet.
    const std::string lora = tmp.file("lora.safetensors"), file = kSd15Folder + "/unet/diffusion_pytorch_model.safetensors";
    write_unet_lora(lora);
    const std::string with_lora = image(tmp, kSd15, {"--lora", lora});
    EXPECT_NE(with_lora, image(tmp, kSd15, {})) << "the LoRA changed nothing";
    EXPECT_EQ(image(tmp, kSd15, {"--lora", lora, "--unet", file}), with_lora);
    const ProcessResult info = run_kiln({"info", file});
    expect_success(info);
    EXPECT_NE(info.out.find("a UNet alone in diffusers' layout"), std::string::npos) << info.out;
    EXPECT_NE(info.out.find("--unet"), std::string::npos) << info.out;
    // Its folder too; a folder that is neither a model nor a UNet's is one error line.
    const ProcessResult folder_info = run_kiln({"info", kSd15Folder + "/unet"});
    expect_success(folder_info);
    EXPECT_NE(folder_info.out.find("a diffusers UNet folder"), std::string::npos) << folder_info.out;
    EXPECT_NE(folder_info.out.find("unet            0.827476 M parameters"), std::string::npos) << folder_info.out;
    expect_one_error_line(run_kiln({"info", kSd15Folder + "/vae"}), {"not a diffusers model", "UNet's folder"});
    expect_one_error_line(run_kiln({"txt2img", "-m", kSd15, "--unet", kSdxlFolder + "/unet", "-p", "x", "-o",
                                    tmp.file("x.png"), "--device", "cpu"}),
                          {"an SDXL UNet beside", "(--unet)"});
}
