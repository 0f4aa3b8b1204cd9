// --unet FILE through the kiln program (the loader's side: tests/models/unet_file_test.cpp): txt2img with the model's
// own UNet as a file alone gives the same PNG bytes as without it, and the quality suite measures it against the
// model's own UNet (no error at all); --unet without -m is an error; the file is left as it was, and `kiln info`
// names it for what it is.
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
