// The built `kiln` program (KILN_CLI): `bench` on the CPU at a tiny size so the command cannot rot,
// its JSON against the documented schema, --compare, --profile / --trace on bench and txt2img, and bad
// input as clear errors.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/bench_schema.h"
#include "runtime/run_cli.h"

using kiln::test::run_cli;

namespace {

std::string temp_path(const std::string& name) { return ::testing::TempDir() + "kiln_cli_bench_" + name; }

nlohmann::json read_json(const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return nlohmann::json::parse(ss.str());  // throws (fails the test) if not JSON
}

struct TraceCheck {
    std::map<std::string, int> zones;  // stage name -> spans
    int ops = 0;
};

// Every op span lies inside a stage span of its thread, and the ops of a stage take no longer than it.
TraceCheck check_trace(const std::string& path) {
    const nlohmann::json trace = read_json(path);
    TraceCheck r;
    EXPECT_TRUE(trace.contains("traceEvents") && trace["traceEvents"].is_array());
    std::vector<nlohmann::json> stages, ops;
    for (const auto& e : trace["traceEvents"]) {
        if (e["ph"] == "M") continue;
        EXPECT_EQ(e["ph"], "X");
        (e["cat"] == "stage" ? stages : ops).push_back(e);
    }
    for (const auto& s : stages) ++r.zones[s["name"].get<std::string>()];
    std::vector<double> inside(stages.size(), 0.0);
    for (const auto& op : ops) {
        const double ts = op["ts"], end = ts + op["dur"].get<double>();
        int found = -1;
        for (size_t i = 0; i < stages.size(); ++i) {
            const double s0 = stages[i]["ts"], s1 = s0 + stages[i]["dur"].get<double>();
            // The innermost enclosing stage: the latest-starting one that holds the op.
            if (stages[i]["tid"] == op["tid"] && s0 <= ts && end <= s1 &&
                (found < 0 || s0 >= stages[found]["ts"].get<double>()))
                found = static_cast<int>(i);
        }
        if (found >= 0) inside[found] += op["dur"].get<double>();
        ++r.ops;
    }
    for (size_t i = 0; i < stages.size(); ++i)
        EXPECT_LE(inside[i], stages[i]["dur"].get<double>() + 1e-3) << stages[i].dump();
    return r;
}

void expect_error(const std::vector<std::string>& args, const std::string& needle) {
    const auto r = run_cli(args);
    ASSERT_TRUE(r.exited) << r.describe();
    EXPECT_EQ(r.exit_code, 1) << r.describe();
    EXPECT_NE(r.err.find("kiln: error:"), std::string::npos) << r.describe();
    EXPECT_NE(r.err.find(needle), std::string::npos) << "wanted '" << needle << "'\n" << r.describe();
}

}  // namespace

TEST(BenchCommand, TinyRunOfEverySuiteWritesSchemaValidJsonTraceAndProfile) {
    const std::string json = temp_path("tiny.json"), trace = temp_path("tiny_trace.json");
    const auto r = run_cli({"bench", "--arch", "tiny", "--suite", "text,unet,vae-decode,vae-encode", "-W", "64", "-H",
                             "64", "--warmup", "1", "--repeats", "2", "--json", json, "--trace", trace, "--profile"});
    ASSERT_TRUE(r.exited && r.exit_code == 0) << r.describe();
    for (const char* s : {"text", "unet", "vae-decode", "vae-encode", "median ms", "TFLOP/s"})
        EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.describe();
    for (const char* s : {"stage", "op kind", "conv2d", "memory (cpu)", "weights"})
        EXPECT_NE(r.err.find(s), std::string::npos) << s << "\n" << r.describe();

    const nlohmann::json j = read_json(json);
    for (const std::string& p : kiln::test::schema_problems(j, kiln::test::documented_fields("bench"))) ADD_FAILURE() << p;
    ASSERT_EQ(j["suites"].size(), 4u);
    for (const auto& s : j["suites"]) {
        EXPECT_EQ(s["runs"], 2);
        EXPECT_EQ(s["seconds"].size(), 2u);
        EXPECT_GT(s["flops"].get<double>(), 0.0) << s["suite"];
        // No leak: the accounting is back where it started after the suite's runs.
        EXPECT_EQ(s["memory"]["end_bytes"], s["memory"]["start_bytes"]) << s["suite"];
        EXPECT_GE(s["peak_device_bytes"].get<int64_t>(), s["memory"]["start_bytes"].get<int64_t>());
        EXPECT_GT(s["memory"]["peak_by_category"]["weights"].get<int64_t>(), 0);
        EXPECT_LE(s["min_s"].get<double>(), s["median_s"].get<double>());
        EXPECT_LE(s["median_s"].get<double>(), s["max_s"].get<double>());
    }

    // One span per zone: 1 load; the 2 timed runs of each suite (the profile pauses for the warm-up), the
    // text suite tokenizing and encoding once per run with the tiny model's one encoder.
    const TraceCheck t = check_trace(trace);
    EXPECT_EQ(t.zones, (std::map<std::string, int>{{"load", 1},
                                                   {"tokenize", 2},
                                                   {"text_encode", 2},
                                                   {"denoise_step", 2},
                                                   {"vae_decode", 2},
                                                   {"vae_encode", 2}}));
    EXPECT_GT(t.ops, 100);

    // --compare of a file with itself: every ratio is 1.
    const std::string cmp = temp_path("cmp.json");
    const auto c = run_cli({"bench", "--compare", json, json, "--json", cmp});
    ASSERT_TRUE(c.exited && c.exit_code == 0) << c.describe();
    const nlohmann::json cj = read_json(cmp);
    for (const std::string& p : kiln::test::schema_problems(cj, kiln::test::documented_fields("compare")))
        ADD_FAILURE() << p;
    ASSERT_GT(cj["ratios"].size(), 30u);
    for (const auto& ratio : cj["ratios"]) EXPECT_EQ(ratio["ratio"], 1.0) << ratio.dump();
    EXPECT_NE(c.out.find("1.000"), std::string::npos) << c.describe();
    for (const std::string& f : {json, trace, cmp}) std::remove(f.c_str());
}

TEST(BenchCommand, Txt2imgSuiteRunsAWholeGeneration) {
    const std::string json = temp_path("txt2img.json");
    const auto r = run_cli({"bench", "--arch", "tiny", "--suite", "txt2img", "-W", "64", "-H", "64", "--steps", "2",
                             "--warmup", "0", "--repeats", "1", "--json", json});
    ASSERT_TRUE(r.exited && r.exit_code == 0) << r.describe();
    const nlohmann::json j = read_json(json);
    for (const std::string& p : kiln::test::schema_problems(j, kiln::test::documented_fields("bench"))) ADD_FAILURE() << p;
    EXPECT_EQ(j["suites"][0]["memory"]["end_bytes"], j["suites"][0]["memory"]["start_bytes"]);
    std::remove(json.c_str());
}

// The full-size SD 1.5 text encoder, so that the real configuration is exercised on every test run:
// its FLOPs follow from CLIP ViT-L/14's shape alone (12 layers, width 768, MLP 3072, 12 heads, 77 tokens).
TEST(BenchCommand, Sd15TextSuiteHasViTLsFlops) {
    const std::string json = temp_path("sd15_text.json");
    const auto r = run_cli({"bench", "--arch", "sd15", "--suite", "text", "--warmup", "0", "--repeats", "1", "--json",
                             json});
    ASSERT_TRUE(r.exited && r.exit_code == 0) << r.describe();
    const nlohmann::json j = read_json(json);
    for (const std::string& p : kiln::test::schema_problems(j, kiln::test::documented_fields("bench"))) ADD_FAILURE() << p;
    const double tokens = 77, width = 768, mlp = 3072, heads = 12, layers = 12;
    const double linear = 2 * tokens * (4 * width * width + 2 * width * mlp);  // q, k, v, out; fc1, fc2
    const double attention = 4 * heads * tokens * tokens * (width / heads);   // q k^T and p v
    EXPECT_DOUBLE_EQ(j["suites"][0]["flops"].get<double>(), layers * (linear + attention));
    // ViT-L's 123,060,480 parameters (transformers' CLIPTextModel) as float32 weights.
    EXPECT_EQ(j["suites"][0]["memory"]["peak_by_category"]["weights"].get<int64_t>(), 123060480LL * 4);
    std::remove(json.c_str());
}

// --weights f16 keeps ViT-L's matrices (12 layers x (4 x 768^2 + 2 x 768 x 3072)) and its 49408 x 768 token
// embedding at 2 bytes a value; the other 180,480 parameters (position embedding, norms, biases) stay
// float32. The report says which weights it measured.
TEST(BenchCommand, Fp16WeightsHalveTheMatricesAndAreRecorded) {
    const std::string json = temp_path("sd15_text_f16.json");
    const auto r = run_cli({"bench", "--arch", "sd15", "--suite", "text", "--warmup", "0", "--repeats", "1",
                            "--weights", "f16", "--json", json});
    ASSERT_TRUE(r.exited && r.exit_code == 0) << r.describe();
    const nlohmann::json j = read_json(json);
    EXPECT_EQ(j["config"]["weights"], "f16");
    const int64_t matrices = 12LL * (4 * 768 * 768 + 2 * 768 * 3072) + 49408LL * 768;
    EXPECT_EQ(j["suites"][0]["memory"]["peak_by_category"]["weights"].get<int64_t>(),
              matrices * 2 + (123060480LL - matrices) * 4);
    std::remove(json.c_str());
}

// A suite builds only what it runs: without vae-encode the SD VAE's encoder (34,163,592 parameters, plus
// quant_conv's 72) is not made, so the weights are the decoder's 49,490,199 (with post_quant_conv) of
// diffusers' AutoencoderKL's 83,653,863, as float32.
TEST(BenchCommand, OnlyVaeEncodeBuildsTheVaeEncoder) {
    auto weights = [](const char* suites) {
        const std::string json = temp_path("sd15_vae.json");
        const auto r = run_cli({"bench", "--arch", "sd15", "--suite", suites, "-W", "64", "-H", "64", "--warmup", "0",
                                "--repeats", "1", "--json", json});
        EXPECT_TRUE(r.exited && r.exit_code == 0) << r.describe();
        const int64_t bytes = read_json(json)["suites"][0]["memory"]["peak_by_category"]["weights"].get<int64_t>();
        std::remove(json.c_str());
        return bytes;
    };
    EXPECT_EQ(weights("vae-decode"), 49490199LL * 4);
    EXPECT_EQ(weights("vae-decode,vae-encode"), 83653863LL * 4);
}

TEST(GenerateProfile, Txt2imgTraceHasOneSpanPerStageZone) {
    const std::string trace = temp_path("gen_trace.json"), png = temp_path("gen.png");
    const auto r = run_cli({"txt2img", "-m", std::string(KILN_TEST_DATA) + "/sd15-mini/sd15-mini.safetensors", "-p",
                             "a red cube", "-W", "64", "-H", "64", "--steps", "2", "--sampler", "euler", "--seed", "1",
                             "-o", png, "--profile", "--trace", trace});
    ASSERT_TRUE(r.exited && r.exit_code == 0) << r.describe();
    for (const char* s : {"load", "tokenize", "text_encode", "denoise_step", "vae_decode", "image_write", "op kind",
                          "memory (cpu)", "mapped_file"})
        EXPECT_NE(r.err.find(s), std::string::npos) << s << "\n" << r.describe();
    // Prompt and negative prompt are tokenized and encoded together, as one batch; Euler evaluates the UNet
    // once per step.
    const TraceCheck t = check_trace(trace);
    EXPECT_EQ(t.zones, (std::map<std::string, int>{{"load", 1},
                                                   {"tokenize", 1},
                                                   {"text_encode", 1},
                                                   {"denoise_step", 2},
                                                   {"vae_decode", 1},
                                                   {"image_write", 1}}));
    for (const std::string& f : {trace, png}) std::remove(f.c_str());
}

TEST(BenchCommand, BadInputIsAClearError) {
    expect_error({"bench", "--suite", "warp-drive", "--arch", "tiny"}, "unknown bench suite 'warp-drive'");
    expect_error({"bench", "--suite", "unet", "--arch", "sd3"}, "unknown architecture 'sd3'");
    expect_error({"bench", "--arch", "tiny"}, "--suite");
    expect_error({"bench", "--suite", "unet", "--arch", "tiny", "--device", "cuda:7"}, "device cuda:7 is not available");
    expect_error({"bench", "--suite", "unet", "--arch", "tiny", "--device", "cpu", "--precision", "fp16"},
                 "--precision fp16: the CPU computes in fp32 only");
    expect_error({"bench", "--suite", "unet", "--arch", "tiny", "-m", "x.safetensors"}, "not both");
    expect_error({"bench", "--suite", "unet", "-m", "/nonexistent/model.safetensors"}, "/nonexistent/model.safetensors");
    expect_error({"bench", "--suite", "unet", "--arch", "tiny", "-W", "60"}, "multiples of 8");
    expect_error({"bench", "--suite", "unet", "--arch", "tiny", "--batch", "0"}, "batch");
    expect_error({"bench", "--suite", "unet", "--arch", "tiny", "--repeats", "0"}, "repeats");
    expect_error({"bench", "--suite", "txt2img", "--arch", "tiny", "--batch", "2"}, "txt2img suite makes one image");
    expect_error({"bench", "--suite", "unet", "--arch", "tiny", "--threads", "-3"}, "thread count");
    expect_error({"bench", "--suite", "unet", "--arch", "tiny", "--json", "/nonexistent-dir/out.json"},
                 "/nonexistent-dir/out.json");
    expect_error({"bench", "--suite", "unet", "--arch", "tiny", "--trace", "/nonexistent-dir/t.json"},
                 "/nonexistent-dir/t.json");
    expect_error({"bench", "--compare", "/nonexistent/a.json", "/nonexistent/b.json"}, "/nonexistent/a.json");
    const std::string not_bench = temp_path("not_bench.json");
    {
        std::ofstream f(not_bench);
        f << "{\"hello\": 1}";
    }
    expect_error({"bench", "--compare", not_bench, not_bench}, "is not a kiln bench report");
    std::remove(not_bench.c_str());
    // CLI11 itself rejects --compare with one file (exit code from CLI11, not a crash).
    const auto one = run_cli({"bench", "--compare", "a.json"});
    EXPECT_TRUE(one.exited && one.exit_code != 0) << one.describe();
}
