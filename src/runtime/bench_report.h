// `kiln bench` results: what one suite measured, the report of a whole run as JSON (schema in
// docs/BENCHMARKS.md, "kiln-bench" version 1), its table, and the comparison of two reports.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/memory.h"
#include "runtime/bench_stats.h"

namespace kiln {

constexpr int kBenchSchemaVersion = 1;

struct BenchSuiteResult {
    std::string suite;         // unet | text | vae-decode | vae-encode | txt2img
    std::string description;   // what one run is, in words
    std::vector<double> seconds;  // one per timed run
    TimingStats stats;
    double flops = 0;          // per run, as the ops report them; 0 when unknown
    double cpu_seconds = 0;    // the process's CPU time (user + system) per timed run, on average
    int64_t peak_device_bytes = 0;  // accounting peak on the device the suite ran on (weights included)
    int64_t peak_host_bytes = 0;    // accounting peak on the host ("cpu"); the same figure on the CPU backend
    int64_t max_rss_bytes = 0;      // the process's peak resident set during the suite (or its lifetime peak)
    int64_t memory_start_bytes = 0, memory_end_bytes = 0;  // device total before the first run, after the last
    std::array<int64_t, kMemoryCategoryCount> peak_by_category{};
};

struct BenchConfig {
    std::string model;        // sd15 | sd21 | sdxl, or the path given with -m
    bool synthetic = true;
    std::string device = "cpu", precision = "fp32";
    std::string weights = "f32";  // precision of the weight matrices in memory: f32, f16, bf16 or "stored"
    int width = 512, height = 512, batch = 1, steps = 20, warmup = 2, repeats = 10, threads = 1;
};

struct BenchReport {
    std::string kiln_version;
    std::string created_utc;  // ISO 8601
    std::string cpu;          // the CPU's model name
    int logical_cpus = 0;
    std::string os;
    BenchConfig config;
    std::vector<BenchSuiteResult> suites;
};

// The machine's description (cpu, logical_cpus, os) and the time now, for a new report.
void describe_machine(BenchReport& report);

nlohmann::json bench_report_to_json(const BenchReport& report);
std::string format_bench_table(const BenchReport& report);

// `kiln bench --suite quality`: a model with quantized (or otherwise reduced) weights against a reference
// model on the same txt2img calls. A document of its own (schema "kiln-bench-quality" version 1,
// docs/BENCHMARKS.md), as it holds no timings.
struct QualityImage {
    std::string prompt;
    uint64_t seed = 0;
    // PSNR of the two 8-bit images (each model's own trajectory from the same seed), peak 255; +infinity
    // when they are identical.
    double psnr_db = 0;
    // Each UNet call's relative L2 error ||q - r|| / ||r||: the reference's output r against the other model's
    // output q on the very same inputs (the reference trajectory's latents, timestep and conditioning).
    std::vector<double> unet_rel_l2;
};

struct QualityConfig {
    std::string model, reference;             // what was measured and what against (paths, or sd15/sd21/sdxl)
    bool synthetic = false;
    std::string weights, reference_weights;   // --weights of each ("stored": the file's own)
    std::string device = "cpu", precision = "fp32", sampler;
    int width = 512, height = 512, steps = 20, threads = 1;
    double guidance = 7.5;
};

struct QualityReport {
    BenchReport machine;  // kiln_version, created_utc, cpu, logical_cpus, os (its config and suites unused)
    QualityConfig config;
    std::vector<QualityImage> images;
};

struct QualitySummary {
    int images = 0, unet_calls = 0;
    double psnr_mean_db = 0, psnr_min_db = 0;      // over the images (mean +infinity if one is identical)
    double unet_rel_l2_mean = 0, unet_rel_l2_max = 0;  // over every UNet call of every image
};
QualitySummary summarize_quality(const QualityReport& report);

nlohmann::json quality_report_to_json(const QualityReport& report);
std::string format_quality_table(const QualityReport& report);

// Reads a report written by bench_report_to_json. IO error if the file cannot be read, InvalidArgument
// naming the file if it is not JSON, not a kiln bench report, or of another schema version.
nlohmann::json read_bench_json(const std::string& path);

struct BenchRatio {
    std::string suite, metric;
    double old_value = 0, new_value = 0;
    double ratio = 0;  // new / old; 1 when both are equal (0 and 0 included); NaN when old is 0 alone
};

struct BenchComparison {
    std::vector<BenchRatio> ratios;        // suites in both reports, every metric either has
    std::vector<std::string> only_old, only_new;  // suites in one report only
    std::vector<std::string> config_differences;  // "width: 512 -> 768"
};

// Checks both documents as read_bench_json does (the names are for messages).
BenchComparison compare_bench_reports(const nlohmann::json& old_report, const nlohmann::json& new_report,
                                      const std::string& old_name = "old", const std::string& new_name = "new");
std::string format_bench_comparison(const BenchComparison& comparison);
nlohmann::json bench_comparison_to_json(const BenchComparison& comparison);

}  // namespace kiln
