#include "runtime/bench_report.h"

#include <sys/utsname.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#include "kiln/error.h"
#include "runtime/text_table.h"

namespace kiln {

namespace {

using nlohmann::json;

// The metrics --compare reads, in the order it prints them.
const char* const kMetrics[] = {"median_s", "min_s",  "max_s",             "mean_s",          "stddev_s",     "cpu_s",
                                "flops",    "tflops", "peak_device_bytes", "peak_host_bytes", "max_rss_bytes"};

std::string cpu_model_name() {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("model name", 0) == 0) {
            const size_t colon = line.find(':');
            if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
        }
    return "unknown";
}

json number_or_null(double v) { return v > 0 && std::isfinite(v) ? json(v) : json(nullptr); }

void check_report(const json& j, const std::string& name) {
    require(j.is_object() && j.value("schema", "") == "kiln-bench", ErrorKind::InvalidArgument,
            name + " is not a kiln bench report (no \"schema\": \"kiln-bench\")");
    require(j.contains("version") && j["version"].is_number_integer(), ErrorKind::InvalidArgument,
            name + " has no schema version");
    require(j["version"].get<int64_t>() == kBenchSchemaVersion, ErrorKind::InvalidArgument,
            name + " is a kiln bench report of schema version " + j["version"].dump() + "; this kiln reads version " +
                std::to_string(kBenchSchemaVersion));
    require(j.contains("suites") && j["suites"].is_array(), ErrorKind::InvalidArgument, name + " has no suites list");
    for (const json& s : j["suites"])
        require(s.is_object() && s.contains("suite") && s["suite"].is_string(), ErrorKind::InvalidArgument,
                name + " has a suite entry without a name");
}

const json* find_suite(const json& report, const std::string& suite) {
    for (const json& s : report["suites"])
        if (s["suite"] == suite) return &s;
    return nullptr;
}

}  // namespace

void describe_machine(BenchReport& r) {
    r.cpu = cpu_model_name();
    r.logical_cpus = static_cast<int>(std::thread::hardware_concurrency());
    utsname u{};
    r.os = uname(&u) == 0 ? std::string(u.sysname) + " " + u.release : "unknown";
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    r.created_utc = buf;
}

json bench_report_to_json(const BenchReport& r) {
    json j;
    j["schema"] = "kiln-bench";
    j["version"] = kBenchSchemaVersion;
    j["kiln_version"] = r.kiln_version;
    j["created_utc"] = r.created_utc;
    j["machine"] = {{"cpu", r.cpu}, {"logical_cpus", r.logical_cpus}, {"os", r.os}};
    const BenchConfig& c = r.config;
    j["config"] = {{"model", c.model},   {"synthetic", c.synthetic}, {"device", c.device}, {"precision", c.precision},
                   {"weights", c.weights},
                   {"width", c.width},   {"height", c.height},       {"batch", c.batch},   {"steps", c.steps},
                   {"warmup", c.warmup}, {"repeats", c.repeats},     {"threads", c.threads}};
    j["suites"] = json::array();
    for (const BenchSuiteResult& s : r.suites) {
        json peaks = json::object();
        for (int k = 0; k < kMemoryCategoryCount; ++k)
            peaks[memory_category_name(static_cast<MemoryCategory>(k))] = s.peak_by_category[k];
        const double tflops = s.flops > 0 && s.stats.median > 0 ? s.flops / s.stats.median / 1e12 : 0;
        j["suites"].push_back({{"suite", s.suite},
                               {"description", s.description},
                               {"runs", s.stats.runs},
                               {"seconds", s.seconds},
                               {"median_s", s.stats.median},
                               {"min_s", s.stats.min},
                               {"max_s", s.stats.max},
                               {"mean_s", s.stats.mean},
                               {"stddev_s", s.stats.stddev},
                               {"cpu_s", s.cpu_seconds},
                               {"flops", number_or_null(s.flops)},
                               {"tflops", number_or_null(tflops)},
                               {"peak_device_bytes", s.peak_device_bytes},
                               {"peak_host_bytes", s.peak_host_bytes},
                               {"max_rss_bytes", s.max_rss_bytes},
                               {"memory",
                                {{"start_bytes", s.memory_start_bytes},
                                 {"end_bytes", s.memory_end_bytes},
                                 {"peak_by_category", peaks}}}});
    }
    return j;
}

std::string format_bench_table(const BenchReport& r) {
    const BenchConfig& c = r.config;
    std::string out = "kiln bench: " + c.model + (c.synthetic ? " (synthetic weights)" : "") + ", " +
                      std::to_string(c.width) + "x" + std::to_string(c.height) + ", batch " + std::to_string(c.batch) +
                      ", " + c.device + " " + c.precision + ", weights " + c.weights + ", " +
                      std::to_string(c.threads) + " threads, " +
                      std::to_string(c.warmup) + " warm-up + " + std::to_string(c.repeats) + " timed runs\n";
    out += "machine: " + r.cpu + " (" + std::to_string(r.logical_cpus) + " logical CPUs), " + r.os + "\n\n";
    TextTable t({"suite", "runs", "median ms", "min ms", "max ms", "stddev ms", "cores", "GFLOP", "TFLOP/s",
                 "peak dev MiB", "peak host MiB", "max RSS MiB"});
    for (const BenchSuiteResult& s : r.suites) {
        const bool counted = s.flops > 0;
        t.add_row({s.suite, std::to_string(s.stats.runs), fixed(s.stats.median * 1e3, 1), fixed(s.stats.min * 1e3, 1),
                   fixed(s.stats.max * 1e3, 1), fixed(s.stats.stddev * 1e3, 1),
                   s.stats.mean > 0 ? fixed(s.cpu_seconds / s.stats.mean, 2) : "-", counted ? fixed(s.flops / 1e9, 1) : "-",
                   counted && s.stats.median > 0 ? fixed(s.flops / s.stats.median / 1e12, 3) : "-",
                   mebibytes(s.peak_device_bytes), mebibytes(s.peak_host_bytes), mebibytes(s.max_rss_bytes)});
    }
    out += t.str();
    out += "(cores: CPU time / wall time of a run; below the thread count when other processes took the cores)\n";
    for (const BenchSuiteResult& s : r.suites) out += "  " + s.suite + ": " + s.description + "\n";
    return out;
}

QualitySummary summarize_quality(const QualityReport& r) {
    QualitySummary s;
    s.images = static_cast<int>(r.images.size());
    double psnr_sum = 0, l2_sum = 0;
    s.psnr_min_db = r.images.empty() ? 0 : INFINITY;
    for (const QualityImage& im : r.images) {
        psnr_sum += im.psnr_db;
        s.psnr_min_db = std::min(s.psnr_min_db, im.psnr_db);
        for (double e : im.unet_rel_l2) {
            l2_sum += e;
            s.unet_rel_l2_max = std::max(s.unet_rel_l2_max, e);
            ++s.unet_calls;
        }
    }
    s.psnr_mean_db = s.images > 0 ? psnr_sum / s.images : 0;
    s.unet_rel_l2_mean = s.unet_calls > 0 ? l2_sum / s.unet_calls : 0;
    return s;
}

namespace {

json finite_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

double mean_of(const std::vector<double>& v) {
    double sum = 0;
    for (double x : v) sum += x;
    return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

double max_of(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

std::string psnr_str(double db) { return std::isfinite(db) ? fixed(db, 2) : "inf"; }

}  // namespace

json quality_report_to_json(const QualityReport& r) {
    json j;
    j["schema"] = "kiln-bench-quality";
    j["version"] = kBenchSchemaVersion;
    j["kiln_version"] = r.machine.kiln_version;
    j["created_utc"] = r.machine.created_utc;
    j["machine"] = {{"cpu", r.machine.cpu}, {"logical_cpus", r.machine.logical_cpus}, {"os", r.machine.os}};
    const QualityConfig& c = r.config;
    j["config"] = {{"model", c.model},       {"reference", c.reference}, {"synthetic", c.synthetic},
                   {"weights", c.weights},   {"reference_weights", c.reference_weights},
                   {"device", c.device},     {"precision", c.precision}, {"sampler", c.sampler},
                   {"width", c.width},       {"height", c.height},       {"steps", c.steps},
                   {"guidance", c.guidance}, {"threads", c.threads}};
    j["images"] = json::array();
    for (const QualityImage& im : r.images)
        j["images"].push_back({{"prompt", im.prompt},
                               {"seed", im.seed},
                               {"psnr_db", finite_or_null(im.psnr_db)},
                               {"unet_calls", im.unet_rel_l2.size()},
                               {"unet_rel_l2", im.unet_rel_l2},
                               {"unet_rel_l2_mean", mean_of(im.unet_rel_l2)},
                               {"unet_rel_l2_max", max_of(im.unet_rel_l2)}});
    const QualitySummary s = summarize_quality(r);
    j["summary"] = {{"images", s.images},
                    {"unet_calls", s.unet_calls},
                    {"psnr_mean_db", finite_or_null(s.psnr_mean_db)},
                    {"psnr_min_db", finite_or_null(s.psnr_min_db)},
                    {"unet_rel_l2_mean", s.unet_rel_l2_mean},
                    {"unet_rel_l2_max", s.unet_rel_l2_max}};
    return j;
}

std::string format_quality_table(const QualityReport& r) {
    const QualityConfig& c = r.config;
    std::string out = "kiln bench --suite quality: " + c.model + (c.synthetic ? " (synthetic weights)" : "") +
                      " with weights " + c.weights + " against " + c.reference + " with weights " +
                      c.reference_weights + ", " + std::to_string(c.width) + "x" + std::to_string(c.height) + ", " +
                      std::to_string(c.steps) + " steps of " + c.sampler + ", guidance " + fixed(c.guidance, 1) +
                      ", " + c.device + " " + c.precision + ", " + std::to_string(c.threads) + " threads\n";
    out += "machine: " + r.machine.cpu + " (" + std::to_string(r.machine.logical_cpus) + " logical CPUs), " +
           r.machine.os + "\n\n";
    TextTable t({"prompt", "seed", "PSNR dB", "UNet calls", "rel L2 mean", "rel L2 max"});
    std::vector<std::string> prompts;
    for (const QualityImage& im : r.images) {
        auto it = std::find(prompts.begin(), prompts.end(), im.prompt);
        if (it == prompts.end()) it = prompts.insert(prompts.end(), im.prompt);
        t.add_row({std::to_string(it - prompts.begin() + 1), std::to_string(im.seed), psnr_str(im.psnr_db),
                   std::to_string(im.unet_rel_l2.size()), fixed(mean_of(im.unet_rel_l2), 6),
                   fixed(max_of(im.unet_rel_l2), 6)});
    }
    out += t.str();
    const QualitySummary s = summarize_quality(r);
    out += "all " + std::to_string(s.images) + " images: PSNR mean " + psnr_str(s.psnr_mean_db) + " dB, min " +
           psnr_str(s.psnr_min_db) + " dB; UNet relative L2 error mean " + fixed(s.unet_rel_l2_mean, 6) + ", max " +
           fixed(s.unet_rel_l2_max, 6) + " over " + std::to_string(s.unet_calls) + " calls\n";
    out += "(PSNR: the 8-bit images, each model sampling its own latents from the seed; rel L2: ||q - r|| / ||r|| of "
           "each UNet call's output, both UNets on the reference's inputs)\n";
    for (size_t i = 0; i < prompts.size(); ++i) out += "  prompt " + std::to_string(i + 1) + ": " + prompts[i] + "\n";
    return out;
}

json read_bench_json(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    require(f.good(), ErrorKind::IO, "cannot read bench report " + path);
    std::stringstream ss;
    ss << f.rdbuf();
    json j;
    try {
        j = json::parse(ss.str());
    } catch (const json::exception& e) {
        fail(ErrorKind::InvalidArgument, path + " is not valid JSON: " + e.what());
    }
    check_report(j, path);
    return j;
}

BenchComparison compare_bench_reports(const json& a, const json& b, const std::string& a_name,
                                      const std::string& b_name) {
    check_report(a, a_name);
    check_report(b, b_name);
    BenchComparison c;
    if (a.contains("config") && b.contains("config") && a["config"].is_object() && b["config"].is_object())
        for (const auto& [key, value] : a["config"].items())
            if (b["config"].contains(key) && b["config"][key] != value)
                c.config_differences.push_back(key + ": " + value.dump() + " -> " + b["config"][key].dump());
    for (const json& s : a["suites"]) {
        const std::string name = s["suite"];
        const json* t = find_suite(b, name);
        if (!t) {
            c.only_old.push_back(name);
            continue;
        }
        for (const char* m : kMetrics) {
            if (!s.contains(m) || !t->contains(m) || !s[m].is_number() || !(*t)[m].is_number()) continue;
            BenchRatio r{name, m, s[m].get<double>(), (*t)[m].get<double>(), 0};
            r.ratio = r.new_value == r.old_value ? 1.0 : (r.old_value != 0 ? r.new_value / r.old_value : NAN);
            c.ratios.push_back(r);
        }
    }
    for (const json& t : b["suites"])
        if (!find_suite(a, t["suite"])) c.only_new.push_back(t["suite"]);
    return c;
}

std::string format_bench_comparison(const BenchComparison& c) {
    std::string out;
    for (const std::string& d : c.config_differences) out += "note: configs differ: " + d + "\n";
    TextTable t({"suite", "metric", "old", "new", "new/old"});
    for (const BenchRatio& r : c.ratios) {
        const bool bytes = r.metric.find("bytes") != std::string::npos;
        const bool secs = r.metric.size() > 2 && r.metric.compare(r.metric.size() - 2, 2, "_s") == 0;
        auto show = [&](double v) {
            if (bytes) return mebibytes(static_cast<int64_t>(v)) + " MiB";
            if (secs) return fixed(v * 1e3, 2) + " ms";
            return r.metric == "flops" ? fixed(v / 1e9, 2) + " GFLOP" : fixed(v, 4);
        };
        t.add_row({r.suite, r.metric, show(r.old_value), show(r.new_value), fixed(r.ratio, 3)});
    }
    out += t.str();
    for (const std::string& s : c.only_old) out += "suite " + s + " only in the old report\n";
    for (const std::string& s : c.only_new) out += "suite " + s + " only in the new report\n";
    return out;
}

json bench_comparison_to_json(const BenchComparison& c) {
    json j;
    j["schema"] = "kiln-bench-compare";
    j["version"] = kBenchSchemaVersion;
    j["ratios"] = json::array();
    for (const BenchRatio& r : c.ratios)
        j["ratios"].push_back({{"suite", r.suite},
                               {"metric", r.metric},
                               {"old", r.old_value},
                               {"new", r.new_value},
                               {"ratio", std::isnan(r.ratio) ? json(nullptr) : json(r.ratio)}});
    j["only_old"] = c.only_old;
    j["only_new"] = c.only_new;
    j["config_differences"] = c.config_differences;
    return j;
}

}  // namespace kiln
