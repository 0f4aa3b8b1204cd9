// `kiln bench`: the standard suites on a synthetic full-size model (or a real one with -m), as a
// table on stdout and optionally JSON; `kiln bench --compare OLD.json NEW.json`: ratios new/old.
#include <algorithm>
#include <cstdio>
#include <fstream>

#include "bench_quality.h"
#include "bench_suites.h"
#include "commands.h"
#include "kiln/error.h"
#include "models/synthetic_weights.h"
#include "profile_session.h"
#include "runtime/cpu_threads.h"
#include "runtime/profiler.h"

namespace kiln::cli {

void write_json_file(const nlohmann::json& j, const std::string& path) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    require(f.good(), ErrorKind::IO, "cannot write " + path);
    f << j.dump(2) << "\n";
    f.flush();
    require(f.good(), ErrorKind::IO, "cannot write " + path + " (disk full?)");
}

namespace {

int run_compare(const BenchOptions& o) {
    require(o.compare.size() == 2, ErrorKind::InvalidArgument, "--compare takes two files: OLD.json NEW.json");
    const nlohmann::json a = read_bench_json(o.compare[0]), b = read_bench_json(o.compare[1]);
    const BenchComparison c = compare_bench_reports(a, b, o.compare[0], o.compare[1]);
    std::printf("kiln bench --compare: %s (old) vs %s (new)\n%s", o.compare[0].c_str(), o.compare[1].c_str(),
                format_bench_comparison(c).c_str());
    if (!o.json.empty()) write_json_file(bench_comparison_to_json(c), o.json);
    return 0;
}

}  // namespace

int run_bench(const BenchOptions& o) {
    if (!o.compare.empty()) return run_compare(o);
    require(o.unet.empty() || !o.model.empty(), ErrorKind::InvalidArgument, "--unet takes a UNet beside -m MODEL");
    if (std::find(o.suites.begin(), o.suites.end(), "quality") != o.suites.end()) return run_quality_bench(o);

    const Placement placement = resolve_placement(o.device, o.precision);
    const VramBudget vram = apply_vram_limit(o.vram, placement.device);
    if (o.vram == "auto") std::fprintf(stderr, "kiln: %s\n", vram.describe(device_name(placement.device)).c_str());
    const int64_t vram_budget = vram.bytes;
    require(!o.suites.empty(), ErrorKind::InvalidArgument,
            "name the suites to run with --suite (unet, text, vae-decode, vae-decode-tiled, vae-encode, txt2img; or quality)");
    require(o.arch.empty() || o.model.empty(), ErrorKind::InvalidArgument,
            "give either --arch (synthetic weights) or -m MODEL, not both");
    std::vector<BenchSuite> suites;
    for (const std::string& s : o.suites) suites.push_back(parse_bench_suite(s));
    const bool synthetic = o.model.empty();
    const SyntheticArch arch = parse_synthetic_arch(o.arch.empty() ? "sd15" : o.arch);
    if (o.threads != 0) set_cpu_threads(o.threads);
    SuiteSettings settings{o.width, o.height, o.batch, o.steps, o.warmup, o.repeats, o.vae_park, vram_budget};
    if (!o.json.empty()) {  // find out now rather than after a long run
        std::ofstream probe(o.json, std::ios::binary | std::ios::app);
        require(probe.good(), ErrorKind::IO, "cannot write " + o.json);
    }

    // txt2img loads under --vram with the weights off the device, for the plan to place (gpu_memory_plan.h); the
    // other suites run the components as they are, so there the weights stay resident.
    const bool offload = vram_budget >= 0 && std::all_of(suites.begin(), suites.end(),
                                                         [](BenchSuite b) { return b == BenchSuite::Txt2img; });
    ProfileSession session(o.profile, o.trace);
    StableDiffusionModel model;
    {
        StageScope zone(Stage::Load);
        if (synthetic) {
            SyntheticParts parts = parts_for(suites);
            parts.weights = weights_option(o.weights);
            parts.device = placement.device;
            parts.precision = placement.precision;
            parts.offload_weights = offload;
            model = make_synthetic_model(arch, parts);
        } else {
            LoadOptions load;
            if (!o.prediction.empty()) load.prediction = o.prediction[0] == 'v' ? "v_prediction" : "epsilon";
            load.weights = weights_option(o.weights);
            load.device = placement.device;
            load.precision = placement.precision;
            load.vae_encoder = parts_for(suites).vae_encoder;
            load.offload_weights = offload;
            load.unet_path = o.unet;
            model = load_model(o.model, load);
        }
    }

    BenchReport report;
    report.kiln_version = kVersion;
    describe_machine(report);
    report.config.model = synthetic ? synthetic_arch_name(arch) : o.model;
    report.config.synthetic = synthetic;
    report.config.device = device_name(placement.device);
    report.config.precision = bench_precision_name(placement.precision);
    // Synthetic weights are made as float32; a file's stay as it stores them unless --weights says.
    report.config.weights = !o.weights.empty() ? o.weights : synthetic ? "f32" : "stored";
    report.config.width = o.width;
    report.config.height = o.height;
    report.config.batch = o.batch;
    report.config.steps = o.steps;
    report.config.warmup = o.warmup;
    report.config.repeats = o.repeats;
    report.config.threads = cpu_threads();
    for (BenchSuite s : suites) {
        std::fprintf(stderr, "bench: %s ...\n", bench_suite_name(s));
        report.suites.push_back(run_bench_suite(model, s, settings));
    }
    session.finish();

    std::printf("%s", format_bench_table(report).c_str());
    if (!o.json.empty()) write_json_file(bench_report_to_json(report), o.json);
    return 0;
}

}  // namespace kiln::cli
