#include "bench_quality.h"

#include <cmath>
#include <cstdio>
#include <fstream>

#include "bench_suites.h"
#include "image/png.h"
#include "kiln/error.h"
#include "models/synthetic_weights.h"
#include "pipeline/generate.h"
#include "profile_session.h"
#include "runtime/cpu_threads.h"
#include "runtime/profiler.h"

namespace kiln::cli {

namespace {

// The demo model's kind of prompt (models/kiln-shapes), so that its images mean something; any model takes them.
const std::vector<std::string> kDefaultPrompts = {
    "a large red circle on the left on a blue background",
    "a small yellow triangle at the top on a gray background",
    "a large cyan ring on a green background",
};
const std::vector<uint64_t> kDefaultSeeds = {1, 2, 3};

// ||q - r|| / ||r|| in double; 0 when both are zero, infinity when only r is.
double relative_l2(const Tensor& q, const Tensor& r) {
    require(q.shape() == r.shape(), ErrorKind::InvalidArgument,
            "the two models' UNet outputs differ in shape: " + shape_str(q.shape()) + " and " + shape_str(r.shape()));
    double diff = 0, ref = 0;
    for (int64_t i = 0; i < r.numel(); ++i) {
        const double d = double(q[i]) - double(r[i]);
        diff += d * d;
        ref += double(r[i]) * double(r[i]);
    }
    if (ref == 0) return diff == 0 ? 0 : INFINITY;
    return std::sqrt(diff / ref);
}

// PSNR of two 8-bit images as kiln writes them (png.h's image_from_tensor), peak 255; infinity when equal.
double psnr_8bit(const Tensor& a, const Tensor& b) {
    const Image x = image_from_tensor(a), y = image_from_tensor(b);
    require(x.pixels.size() == y.pixels.size(), ErrorKind::InvalidArgument, "the two models' images differ in size");
    double sum = 0;
    for (size_t i = 0; i < x.pixels.size(); ++i) {
        const double d = double(x.pixels[i]) - double(y.pixels[i]);
        sum += d * d;
    }
    const double mse = sum / static_cast<double>(x.pixels.size());
    return mse == 0 ? INFINITY : 10.0 * std::log10(255.0 * 255.0 / mse);
}


}  // namespace

std::vector<QualityImage> measure_quality(const StableDiffusionModel& reference, const StableDiffusionModel& measured,
                                          const QualitySettings& s) {
    require(reference.device == measured.device && reference.precision == measured.precision,
            ErrorKind::InvalidArgument, "the quality suite's two models must run on one device in one precision");
    // A reference of another architecture or size would fail inside the UNet with a less helpful message.
    require(reference.arch == measured.arch && reference.unet->parameter_count() == measured.unet->parameter_count(),
            ErrorKind::InvalidArgument,
            "the reference is not the same model: its UNet has " + std::to_string(reference.unet->parameter_count()) +
                " parameters, the measured model's " + std::to_string(measured.unet->parameter_count()));
    std::vector<QualityImage> images;
    for (const std::string& prompt : s.prompts)
        for (uint64_t seed : s.seeds) {
            std::fprintf(stderr, "bench: quality, prompt %zu seed %llu ...\n", images.size() / s.seeds.size() + 1,
                         static_cast<unsigned long long>(seed));
            QualityImage im;
            im.prompt = prompt;
            im.seed = seed;
            GenerationRequest req;
            req.prompt = prompt;
            req.width = s.width;
            req.height = s.height;
            req.steps = s.steps;
            req.cfg_scale = s.guidance;
            req.seed = seed;
            // The other UNet on the reference's inputs as they are (on the device, in its precision); eager, as
            // one call of each shape would not repay a recording.
            req.unet_observer = [&](const UNetInputs& in, const Tensor& out) {
                UNetInputs same{in.sample, in.timesteps, in.context, in.text_embeds, in.time_ids};
                const Tensor q = measured.unet->forward(same);
                im.unet_rel_l2.push_back(relative_l2(q.on_device() ? q.to_host() : q, out));
            };
            const GenerationResult ref = generate(reference, req);
            req.unet_observer = nullptr;
            const GenerationResult own = generate(measured, req);
            im.psnr_db = psnr_8bit(own.image, ref.image);
            images.push_back(std::move(im));
        }
    return images;
}

int run_quality_bench(const BenchOptions& o) {
    require(o.suites.size() == 1, ErrorKind::InvalidArgument,
            "the quality suite runs alone (it compares images and times nothing): --suite quality");
    require(o.arch.empty() || o.model.empty(), ErrorKind::InvalidArgument,
            "give either --arch (synthetic weights) or -m MODEL, not both");
    require(o.reference.empty() || !o.model.empty(), ErrorKind::InvalidArgument,
            "--reference FILE needs -m MODEL, the model measured against it");
    require(!o.weights.empty() || !o.reference.empty() || !o.unet.empty(), ErrorKind::InvalidArgument,
            "the quality suite measures --weights W against the model's own weights, -m MODEL against "
            "--reference FILE, or -m MODEL with --unet FILE against -m MODEL alone: give one of them");
    require(o.vram.empty(), ErrorKind::InvalidArgument, "--vram does not apply to the quality suite (it holds both models)");
    require(o.batch == 1, ErrorKind::InvalidArgument, "the quality suite makes one image per prompt and seed (--batch 1)");
    const Placement placement = resolve_placement(o.device, o.precision);
    if (o.threads != 0) set_cpu_threads(o.threads);
    QualitySettings s;
    s.width = o.width;
    s.height = o.height;
    s.steps = o.steps;
    s.prompts = o.prompts.empty() ? kDefaultPrompts : o.prompts;
    s.seeds = o.seeds.empty() ? kDefaultSeeds : o.seeds;
    if (!o.json.empty()) {  // find out now rather than after a long run
        std::ofstream probe(o.json, std::ios::binary | std::ios::app);
        require(probe.good(), ErrorKind::IO, "cannot write " + o.json);
    }

    ProfileSession session(o.profile, o.trace);
    const bool synthetic = o.model.empty();
    const SyntheticArch arch = parse_synthetic_arch(o.arch.empty() ? "sd15" : o.arch);
    // Synthetic weights are made in float32; the reference holds them in fp16, as a released checkpoint does.
    auto load = [&](const std::string& path, const std::string& weights, const std::string& unet) {
        StageScope zone(Stage::Load);
        if (synthetic) {
            SyntheticParts parts;
            parts.weights = weights_option(weights);
            parts.device = placement.device;
            parts.precision = placement.precision;
            parts.vae_encoder = false;
            return make_synthetic_model(arch, parts);
        }
        LoadOptions options;
        if (!o.prediction.empty()) options.prediction = o.prediction[0] == 'v' ? "v_prediction" : "epsilon";
        options.weights = weights_option(weights);
        options.device = placement.device;
        options.precision = placement.precision;
        options.vae_encoder = false;
        options.unet_path = unet;
        return load_model(path, options);
    };
    const std::string reference_path = o.reference.empty() ? o.model : o.reference;
    const std::string reference_weights = synthetic ? "f16" : "";
    // --unet replaces the measured model's UNet only: a quantized UNet file against the model's own.
    const StableDiffusionModel reference = load(reference_path, reference_weights, "");
    const StableDiffusionModel measured = load(o.model, o.weights, o.unet);

    QualityReport report;
    report.machine.kiln_version = kVersion;
    describe_machine(report.machine);
    QualityConfig& c = report.config;
    c.model = synthetic ? synthetic_arch_name(arch) : o.unet.empty() ? o.model : o.model + " with --unet " + o.unet;
    c.reference = synthetic ? c.model : reference_path;
    c.synthetic = synthetic;
    c.weights = o.weights.empty() ? "stored" : o.weights;
    c.reference_weights = reference_weights.empty() ? "stored" : reference_weights;
    c.device = device_name(placement.device);
    c.precision = bench_precision_name(placement.precision);
    c.sampler = default_sampler(reference);
    c.width = s.width;
    c.height = s.height;
    c.steps = s.steps;
    c.guidance = s.guidance;
    c.threads = cpu_threads();
    report.images = measure_quality(reference, measured, s);
    session.finish();

    std::printf("%s", format_quality_table(report).c_str());
    if (!o.json.empty()) write_json_file(quality_report_to_json(report), o.json);
    return 0;
}

}  // namespace kiln::cli
