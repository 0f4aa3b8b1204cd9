// `--vae-tiling` through the kiln program: a tiled decode writes the image the whole decode writes (on the CPU
// the tiled decode is bit-identical, tests/models/vae_tiled_decode_test.cpp), and a wrong value is refused.
#include <gtest/gtest.h>

#include <string>

#include "cli/cli_expectations.h"
#include "cli/run_process.h"
#include "cli/test_files.h"
#include "image/png.h"

using namespace kiln::test;

namespace {

const std::string kSd15 = std::string(KILN_TEST_DATA) + "/sd15-mini/sd15-mini.safetensors";

ProcessResult draw(const std::string& out, const std::string& tiling) {
    return run_kiln({"txt2img", "-m", kSd15, "-p", "a red circle", "-W", "64", "-H", "72", "--steps", "2", "--seed",
                     "7", "--device", "cpu", "-o", out, "--vae-tiling", tiling, "--quiet"});
}

}  // namespace

TEST(VaeTiling, TiledAndWholeDecodesWriteTheSamePixels) {
    TempDir tmp;
    const std::string whole = tmp.file("whole.png"), tiled = tmp.file("tiled.png");
    expect_success(draw(whole, "off"));
    expect_success(draw(tiled, "on"));
    EXPECT_EQ(kiln::read_png(whole).pixels, kiln::read_png(tiled).pixels);
}

TEST(VaeTiling, AnUnknownModeIsRefused) {
    TempDir tmp;
    expect_one_error_line(draw(tmp.file("x.png"), "sometimes"), {"--vae-tiling", "sometimes"});
    expect_one_error_line(run_kiln({"bench", "--suite", "vae-decode-tiled", "-m", kSd15, "--vae-park", "attic"}),
                          {"--vae-park", "attic"});
}
