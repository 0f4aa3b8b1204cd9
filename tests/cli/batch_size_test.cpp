// `--batch-size`, `--clip-skip` and `--latents-out` through the kiln program: the files it writes, the
// AUTOMATIC1111 keys of each image, and latents equal to what generate() gives for the same request (so the
// options reach the library, and the sweep's comparisons of --latents-out are comparisons of generate()).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli/cli_expectations.h"
#include "cli/run_process.h"
#include "cli/test_files.h"
#include "common/fixtures.h"
#include "image/png.h"
#include "io/safetensors.h"
#include "pipeline/generate.h"

using namespace kiln::test;
namespace fs = std::filesystem;

namespace {

const std::string kSd15 = std::string(KILN_TEST_DATA) + "/sd15-mini/sd15-mini.safetensors";

std::string infotext(const std::string& png) {
    for (const auto& [key, value] : kiln::read_png_text(png))
        if (key == "parameters") return value;
    return "";
}

}  // namespace

TEST(BatchSize, FilesKeysAndLatentsOfTwoBatchesOfTwo) {
    TempDir tmp;
    const std::string out = tmp.file("b.png"), latents = tmp.file("b.safetensors");
    const ProcessResult r =
        run_kiln({"txt2img", "-m", kSd15, "-p", "a red circle", "-n", "blurry", "-W", "64", "-H", "72", "--steps", "3",
                  "--seed", "1000", "--batch-count", "2", "--batch-size", "2", "--clip-skip", "2", "--sampler",
                  "euler_a", "-o", out, "--latents-out", latents, "--quiet"});
    expect_success(r);
    const std::vector<std::string> pngs = {tmp.file("b-1.png"), tmp.file("b-2.png"), tmp.file("b-3.png"),
                                           tmp.file("b-4.png")};
    EXPECT_EQ(r.out, pngs[0] + "\n" + pngs[1] + "\n" + pngs[2] + "\n" + pngs[3] + "\n");
    for (int i = 0; i < 4; ++i) {
        const std::string text = infotext(pngs[i]);
        EXPECT_NE(text.find("Seed: " + std::to_string(1000 + i / 2) + ","), std::string::npos) << text;
        EXPECT_NE(text.find("Clip skip: 2, "), std::string::npos) << text;
        EXPECT_NE(text.find("Batch size: 2, Batch pos: " + std::to_string(i % 2) + ","), std::string::npos) << text;
    }
    EXPECT_NE(kiln::read_png(pngs[0]).pixels, kiln::read_png(pngs[1]).pixels) << "one noise draw, two images";

    // The first batch's latents against the library's for the same request.
    kiln::LoadOptions options;
    options.vae_encoder = false;
    const kiln::StableDiffusionModel model = kiln::load_model(kSd15, options);
    kiln::GenerationRequest req;
    req.prompt = "a red circle";
    req.negative_prompt = "blurry";
    req.width = 64;
    req.height = 72;
    req.steps = 3;
    req.seed = 1000;
    req.batch_size = 2;
    req.clip_skip = 2;
    req.sampler = "euler_a";
    const kiln::Tensor written = kiln::SafetensorsFile::open(tmp.file("b-1.safetensors")).load("latents");
    ASSERT_EQ(written.shape(), (kiln::Shape{2, 4, 9, 8}));
    // The same float32 arithmetic in another process: equal up to the summation order of other thread counts.
    EXPECT_LT(relative_error(written, kiln::generate(model, req).final_latent), 1e-5);
    req.clip_skip = 1;  // and the option mattered: without it the latents are another picture's
    EXPECT_GT(relative_error(written, kiln::generate(model, req).final_latent), 1e-3);
    EXPECT_TRUE(fs::exists(tmp.file("b-2.safetensors")));
}

TEST(BatchSize, OutOfRangeIsOneLineError) {
    TempDir tmp;
    for (const char* n : {"0", "65"}) {
        const ProcessResult r = run_kiln({"txt2img", "-m", kSd15, "-p", "x", "-W", "64", "-H", "64", "--steps", "1",
                                          "--batch-size", n, "-o", tmp.file("x.png"), "--quiet"});
        EXPECT_TRUE(r.exited && r.exit_code != 0) << r.describe();
        EXPECT_NE(r.err.find("batch size must be between 1 and 64"), std::string::npos) << r.err;
    }
}

// --latents-out into a folder that does not exist: one error line naming the file, and no PNG written after it.
TEST(LatentsOut, UnwritablePathIsOneLineError) {
    TempDir tmp;
    const std::string bad = tmp.file("no-such-folder/latents.safetensors"), png = tmp.file("x.png");
    expect_one_error_line(run_kiln({"txt2img", "-m", kSd15, "-p", "x", "-W", "64", "-H", "64", "--steps", "1", "-o",
                                    png, "--latents-out", bad, "--quiet"}),
                          {bad});
    EXPECT_FALSE(fs::exists(png));
}
