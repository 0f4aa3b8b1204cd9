// Bench statistics, the JSON report against the schema documented in docs/BENCHMARKS.md, and
// --compare's ratios.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "kiln/error.h"
#include "runtime/bench_report.h"
#include "runtime/bench_stats.h"
#include "runtime/bench_schema.h"

using namespace kiln;

namespace {

BenchReport sample_report() {
    BenchReport r;
    r.kiln_version = "kiln test";
    describe_machine(r);
    r.config.model = "sd15";
    r.config.threads = 2;
    BenchSuiteResult unet;
    unet.suite = "unet";
    unet.description = "one UNet call";
    unet.seconds = {1.5, 1.25, 1.75};
    unet.stats = timing_stats(unet.seconds);
    unet.flops = 2.5e12;
    unet.cpu_seconds = 2.9;
    unet.peak_device_bytes = unet.peak_host_bytes = 4000000000;
    unet.max_rss_bytes = 4100000000;
    unet.memory_start_bytes = unet.memory_end_bytes = 3400000000;
    unet.peak_by_category[0] = 3400000000;
    BenchSuiteResult text;  // one run, no FLOPs reported: stddev 0, flops and tflops null
    text.suite = "text";
    text.description = "encode";
    text.seconds = {0.25};
    text.stats = timing_stats(text.seconds);
    r.suites = {unet, text};
    return r;
}

std::string temp_path(const std::string& name) { return ::testing::TempDir() + "kiln_bench_" + name; }

void write_file(const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary);
    f << text;
}

}  // namespace

TEST(TimingStats, OddAndEvenCountsFromFirstPrinciples) {
    // 1, 2, 3: median 2, mean 2, sample variance ((1 + 0 + 1) / 2) = 1.
    const TimingStats a = timing_stats({3, 1, 2});
    EXPECT_EQ(a.runs, 3);
    EXPECT_EQ(a.median, 2);
    EXPECT_EQ(a.min, 1);
    EXPECT_EQ(a.max, 3);
    EXPECT_EQ(a.mean, 2);
    EXPECT_DOUBLE_EQ(a.stddev, 1.0);
    // 1, 2, 3, 4: median (2 + 3) / 2, sample variance (2.25 + 0.25 + 0.25 + 2.25) / 3 = 5/3.
    const TimingStats b = timing_stats({4, 2, 1, 3});
    EXPECT_EQ(b.median, 2.5);
    EXPECT_DOUBLE_EQ(b.stddev, std::sqrt(5.0 / 3.0));
    EXPECT_EQ(timing_stats({0.5}).stddev, 0.0);
    EXPECT_THROW(timing_stats({}), Error);
    EXPECT_THROW(timing_stats({1.0, -1.0}), Error);
    EXPECT_THROW(timing_stats({NAN}), Error);
}

TEST(BenchJson, MatchesTheDocumentedSchema) {
    const nlohmann::json j = bench_report_to_json(sample_report());
    const auto table = test::documented_fields("bench");
    ASSERT_GT(table.size(), 30u) << "the field table in docs/BENCHMARKS.md was not found";
    const auto problems = test::schema_problems(j, table);
    for (const std::string& p : problems) ADD_FAILURE() << p;
    EXPECT_EQ(j["schema"], "kiln-bench");
    EXPECT_EQ(j["version"], kBenchSchemaVersion);
    EXPECT_TRUE(j["suites"][1]["flops"].is_null());
    EXPECT_TRUE(j["suites"][1]["tflops"].is_null());
    EXPECT_DOUBLE_EQ(j["suites"][0]["tflops"].get<double>(), 2.5e12 / 1.5 / 1e12);
}

TEST(BenchJson, SchemaCheckerCatchesDrift) {
    // The checker itself: a missing field, an undocumented one and a wrong type are all reported.
    nlohmann::json j = bench_report_to_json(sample_report());
    const auto table = test::documented_fields("bench");
    j["suites"][0].erase("median_s");
    j["suites"][1]["surprise"] = 1;
    j["config"]["width"] = "512";
    EXPECT_EQ(test::schema_problems(j, table).size(), 3u);
}

TEST(BenchCompare, AReportAgainstItselfGivesRatiosOfOne) {
    const nlohmann::json j = bench_report_to_json(sample_report());
    const BenchComparison c = compare_bench_reports(j, j);
    ASSERT_FALSE(c.ratios.empty());
    for (const BenchRatio& r : c.ratios) EXPECT_EQ(r.ratio, 1.0) << r.suite << " " << r.metric;
    EXPECT_TRUE(c.only_old.empty() && c.only_new.empty() && c.config_differences.empty());
    // Every metric of the unet suite, and the text suite's (its null FLOPs are left out; stddev 0 vs 0 is 1).
    EXPECT_EQ(c.ratios.size(), 11u + 9u);
    const nlohmann::json cj = bench_comparison_to_json(c);
    for (const std::string& p : test::schema_problems(cj, test::documented_fields("compare"))) ADD_FAILURE() << p;
    EXPECT_NE(format_bench_comparison(c).find("1.000"), std::string::npos);
}

TEST(BenchCompare, RatiosAreNewOverOld) {
    const nlohmann::json a = bench_report_to_json(sample_report());
    nlohmann::json b = a;
    b["suites"][0]["median_s"] = 3.0;  // twice as slow
    b["suites"].erase(1);
    b["config"]["width"] = 768;
    const BenchComparison c = compare_bench_reports(a, b);
    bool saw = false;
    for (const BenchRatio& r : c.ratios)
        if (r.suite == "unet" && r.metric == "median_s") {
            EXPECT_DOUBLE_EQ(r.ratio, 2.0);
            saw = true;
        }
    EXPECT_TRUE(saw);
    EXPECT_EQ(c.only_old, (std::vector<std::string>{"text"}));
    ASSERT_EQ(c.config_differences.size(), 1u);
    EXPECT_EQ(c.config_differences[0], "width: 512 -> 768");
    // 0 -> something has no ratio.
    nlohmann::json z = a;
    z["suites"][1]["stddev_s"] = 0.5;
    for (const BenchRatio& r : compare_bench_reports(a, z).ratios) {
        if (r.suite == "text" && r.metric == "stddev_s") {
            EXPECT_TRUE(std::isnan(r.ratio));
        }
    }
}

TEST(BenchCompare, RejectsWhatIsNotAReportOfThisVersion) {
    const nlohmann::json good = bench_report_to_json(sample_report());
    nlohmann::json other_version = good;
    other_version["version"] = 2;
    nlohmann::json no_suites = good;
    no_suites.erase("suites");
    for (const nlohmann::json& bad : {nlohmann::json::object(), nlohmann::json::array(), other_version, no_suites}) {
        try {
            compare_bench_reports(good, bad, "a.json", "b.json");
            ADD_FAILURE() << "accepted " << bad.dump().substr(0, 60);
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
            EXPECT_NE(std::string(e.what()).find("b.json"), std::string::npos) << e.what();
        }
    }
}

TEST(BenchCompare, ReadingFilesNamesTheProblem) {
    try {
        read_bench_json(temp_path("missing.json"));
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::IO);
    }
    const std::string garbage = temp_path("garbage.json");
    write_file(garbage, "{not json");
    try {
        read_bench_json(garbage);
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
        EXPECT_NE(std::string(e.what()).find(garbage), std::string::npos);
    }
    const std::string good = temp_path("good.json");
    write_file(good, bench_report_to_json(sample_report()).dump());
    EXPECT_EQ(read_bench_json(good)["suites"].size(), 2u);
    std::remove(garbage.c_str());
    std::remove(good.c_str());
}

TEST(BenchTable, ShowsEverySuiteWithTimesAndRates) {
    const std::string t = format_bench_table(sample_report());
    // cores = 2.9 s of CPU over a mean of 1.5 s.
    for (const char* s : {"unet", "text", "median ms", "TFLOP/s", "peak dev MiB", "max RSS MiB", "1500.0", "1.667", "1.93"})
        EXPECT_NE(t.find(s), std::string::npos) << s << "\n" << t;
}
