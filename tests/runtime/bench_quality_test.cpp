// `kiln bench --suite quality` on the demo model (real weights), kept small (64x64, 2 steps, one image):
// the model against itself is exact, 8-bit blocks are close, 4-bit blocks are further off, and the JSON
// matches its documented schema.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/bench_schema.h"
#include "runtime/run_cli.h"

using kiln::test::run_cli;

namespace {

std::string temp_path(const std::string& name) { return ::testing::TempDir() + "kiln_cli_quality_" + name; }

// One quality run of the demo model (one prompt, one seed) with `extra` arguments; its JSON report.
nlohmann::json quality_run(const std::string& name, const std::vector<std::string>& extra) {
    const std::string json = temp_path(name + ".json");
    std::vector<std::string> args = {"bench", "--suite", "quality", "-m", KILN_DEMO_MODEL, "-W", "64", "-H", "64",
                                     "--steps", "2", "-p", "a large red circle on a blue background", "--seeds", "7",
                                     "--device", "cpu", "--json", json};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_cli(args);
    EXPECT_TRUE(r.exited && r.exit_code == 0) << r.describe();
    EXPECT_NE(r.out.find("PSNR dB"), std::string::npos) << r.describe();
    std::ifstream f(json);
    std::stringstream ss;
    ss << f.rdbuf();
    std::remove(json.c_str());
    nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.describe();
    for (const std::string& p : kiln::test::schema_problems(j, kiln::test::documented_fields("quality"))) ADD_FAILURE() << p;
    return j;
}

}  // namespace

TEST(BenchQuality, ModelAgainstItselfIsExactAndCoarserBlocksAreFurtherOff) {
    // The same file twice: the same arithmetic on the same inputs, so every UNet output and the image are
    // bit for bit the same: error 0 and an infinite PSNR (null in JSON).
    const nlohmann::json self = quality_run("self", {"--reference", KILN_DEMO_MODEL});
    ASSERT_EQ(self["images"].size(), 1u);
    const auto& im = self["images"][0];
    EXPECT_TRUE(im["psnr_db"].is_null()) << im.dump();
    EXPECT_TRUE(self["summary"]["psnr_min_db"].is_null());
    EXPECT_EQ(self["config"]["weights"], "stored");
    // PNDM takes one more UNet evaluation than steps at the start (its Runge-Kutta warm-up), so at least steps.
    EXPECT_GE(im["unet_calls"].get<int>(), 2);
    EXPECT_EQ(im["unet_calls"].get<size_t>(), im["unet_rel_l2"].size());
    for (const auto& e : im["unet_rel_l2"]) EXPECT_EQ(e.get<double>(), 0.0);

    const nlohmann::json q8 = quality_run("q8", {"--weights", "q8_0"});
    const nlohmann::json q4 = quality_run("q4", {"--weights", "q4_0"});
    EXPECT_EQ(q8["config"]["weights"], "q8_0");
    EXPECT_EQ(q8["config"]["reference_weights"], "stored");
    // Both trajectories make the same number of UNet calls as the exact run.
    EXPECT_EQ(q8["images"][0]["unet_calls"], im["unet_calls"]);
    const double q8_psnr = q8["images"][0]["psnr_db"].get<double>(), q4_psnr = q4["images"][0]["psnr_db"].get<double>();
    // Quantized weights change the arithmetic: every call's output differs, and the images are no longer equal
    // (an 8-bit image of 64x64 differing in one value of one channel has PSNR 10 log10(255^2 * 12288) = 89 dB).
    for (const nlohmann::json* j : {&q8, &q4}) {
        for (const auto& e : (*j)["images"][0]["unet_rel_l2"]) EXPECT_GT(e.get<double>(), 0.0);
        EXPECT_LT((*j)["images"][0]["psnr_db"].get<double>(), 90.0);
        EXPECT_GT((*j)["images"][0]["psnr_db"].get<double>(), 0.0);
        // The summary is the image's own figures (one image).
        EXPECT_DOUBLE_EQ((*j)["summary"]["psnr_mean_db"].get<double>(), (*j)["images"][0]["psnr_db"].get<double>());
        EXPECT_DOUBLE_EQ((*j)["summary"]["unet_rel_l2_max"].get<double>(),
                         (*j)["images"][0]["unet_rel_l2_max"].get<double>());
    }
    // 16 levels per block instead of 255: the UNet's error grows and the image moves further from the reference.
    EXPECT_LT(q8["summary"]["unet_rel_l2_max"].get<double>(), q4["summary"]["unet_rel_l2_mean"].get<double>());
    EXPECT_GT(q8_psnr, q4_psnr);
}

TEST(BenchQuality, BadInputIsAClearError) {
    auto expect_error = [](const std::vector<std::string>& args, const std::string& needle) {
        const auto r = run_cli(args);
        EXPECT_TRUE(r.exited && r.exit_code == 1 && r.err.find(needle) != std::string::npos) << needle << r.describe();
    };
    const std::string model = KILN_DEMO_MODEL;
    expect_error({"bench", "--suite", "quality", "-m", model}, "give one of them");
    expect_error({"bench", "--suite", "quality,unet", "-m", model, "--weights", "q8_0"}, "runs alone");
    expect_error({"bench", "--suite", "quality", "--arch", "tiny", "--reference", model}, "needs -m MODEL");
    expect_error({"bench", "--suite", "quality", "-m", model, "--reference",
                  std::string(KILN_TEST_DATA) + "/sd15-mini/sd15-mini.safetensors"},
                 "not the same model");
    expect_error({"bench", "--suite", "quality", "-m", model, "--weights", "q8_0", "--steps", "0"}, "steps");
}
