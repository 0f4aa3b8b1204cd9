// `--vae-tiling` through the kiln program: a tiled decode writes the image the whole decode writes (on the CPU
// the tiled decode is bit-identical, tests/models/vae_tiled_decode_test.cpp), and a wrong value is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/cli_expectations.h"
#include "cli/run_process.h"
#include "cli/test_files.h"
#include "image/png.h"

using namespace kiln::test;

namespace {

const std::string kSd15 = std::string(KILN_TEST_DATA) + "/sd15-mini/sd15-mini.safetensors";

ProcessResult draw(const std::string& out, const std::string& tiling, const std::string& batch = "1") {
    return run_kiln({"txt2img", "-m", kSd15, "-p", "a red circle", "-W", "64", "-H", "72", "--steps", "2", "--seed",
                     "7", "--device", "cpu", "-o", out, "--vae-tiling", tiling, "--batch-size", batch, "--quiet"});
}

}  // namespace

TEST(VaeTiling, TiledAndWholeDecodesWriteTheSamePixels) {
    TempDir tmp;
    const std::string whole = tmp.file("whole.png"), tiled = tmp.file("tiled.png");
    expect_success(draw(whole, "off"));
    expect_success(draw(tiled, "on"));
    EXPECT_EQ(kiln::read_png(whole).pixels, kiln::read_png(tiled).pixels);
}

// A batch in bands is decoded one image at a time (the whole decode takes the batch at once): the same pictures
// up to rounding (the mid block's products blocked for another row count, as Vae.BatchedDecodeMatchesOneByOne
// bounds in float32, 2e-5 of the scale: at most one level of 255).
TEST(VaeTiling, ABatchInBandsIsDecodedImageByImage) {
    TempDir tmp;
    expect_success(draw(tmp.file("whole.png"), "off", "2"));
    expect_success(draw(tmp.file("tiled.png"), "on", "2"));
    for (const char* i : {"-1.png", "-2.png"}) {
        const std::vector<uint8_t> whole = kiln::read_png(tmp.file(std::string("whole") + i)).pixels;
        const std::vector<uint8_t> tiled = kiln::read_png(tmp.file(std::string("tiled") + i)).pixels;
        ASSERT_EQ(whole.size(), tiled.size()) << i;
        int most = 0;
        for (size_t k = 0; k < whole.size(); ++k) most = std::max(most, std::abs(int(whole[k]) - int(tiled[k])));
        EXPECT_LE(most, 1) << i;
    }
}

TEST(VaeTiling, AnUnknownModeIsRefused) {
    TempDir tmp;
    expect_one_error_line(draw(tmp.file("x.png"), "sometimes"), {"--vae-tiling", "sometimes"});
    expect_one_error_line(run_kiln({"bench", "--suite", "vae-decode-tiled", "-m", kSd15, "--vae-park", "attic"}),
                          {"--vae-park", "attic"});
}
