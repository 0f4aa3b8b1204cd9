#include "pipeline/vae_tiling.h"
#include "bench_suites.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "core/backend.h"
#include "core/memory.h"
#include "kiln/error.h"
#include "pipeline/generate.h"
#include "rng/noise_generator_factory.h"
#include "runtime/flop_counter.h"
#include "runtime/process_usage.h"
#include "runtime/profiler.h"

namespace kiln::cli {

namespace {

constexpr const char* kPrompt = "a photo of an astronaut riding a horse on mars";

std::string size_str(int64_t w, int64_t h) { return std::to_string(w) + "x" + std::to_string(h); }

// One timed run's work, with inputs made beforehand so that they are not timed or counted as a leak.
struct SuiteRun {
    std::string description;
    std::function<void()> run;
};

SuiteRun make_text_run(const StableDiffusionModel& m, const SuiteSettings& s) {
    require(!m.text_encoders.empty(), ErrorKind::InvalidArgument, "the text suite needs the model's text encoders");
    std::string names;
    for (const TextEncoder& te : m.text_encoders)
        names += (names.empty() ? "" : " + ") + std::to_string(te.model.config().layers) + "-layer " +
                 std::to_string(te.model.config().hidden) + "-wide";
    return {"tokenize and encode " + std::to_string(s.batch) + " prompt(s) of 77 tokens with " + names +
                " CLIP text encoder(s)",
            [&m, batch = s.batch] {
                for (const TextEncoder& te : m.text_encoders) {
                    std::vector<std::vector<int>> ids;
                    {
                        StageScope zone(Stage::Tokenize);
                        for (int b = 0; b < batch; ++b) ids.push_back(te.tokenizer.encode_padded(kPrompt, te.tokenizer.pad_id()));
                    }
                    StageScope zone(Stage::TextEncode);
                    te.model.encode(ids, 1);  // its outputs come back to the host, so the GPU is done
                }
            }};
}

struct UnetInputs {
    Tensor sample, context, text_embeds, time_ids, timesteps;
};

// The model's GPU backend, or null on the CPU.
Backend* gpu_of(const StableDiffusionModel& m) { return m.device.is_cpu() ? nullptr : &backend_for(m.device); }

SuiteRun make_unet_run(const StableDiffusionModel& m, const SuiteSettings& s, UnetInputs& in) {
    require(m.unet != nullptr, ErrorKind::InvalidArgument, "the unet suite needs the model's UNet");
    const UNetConfig& c = m.unet->config();
    const int64_t b = s.batch, h = s.height / 8, w = s.width / 8;
    auto rng = make_noise_generator("cpu", 1);
    in.sample = rng->randn({b, c.in_channels, h, w});
    in.context = rng->randn({b, 77, c.cross_attention_dim});
    if (c.addition_time_embed_dim > 0) {
        in.text_embeds = rng->randn({b, c.projection_class_embeddings_input_dim - 6 * c.addition_time_embed_dim});
        std::vector<float> ids;
        for (int64_t i = 0; i < b; ++i)
            ids.insert(ids.end(), {float(s.height), float(s.width), 0.0f, 0.0f, float(s.height), float(s.width)});
        in.time_ids = Tensor({b, 6}, std::move(ids));
    }
    in.timesteps = Tensor({b}, std::vector<float>(b, 500.0f));
    Backend* gpu = gpu_of(m);
    if (gpu) {  // inputs go to the GPU once, as the pipeline's conditioning does
        for (Tensor* t : {&in.sample, &in.context, &in.text_embeds})
            if (!t->empty()) *t = t->to_device(*gpu, m.precision);
        for (Tensor* t : {&in.time_ids, &in.timesteps})
            if (!t->empty()) *t = t->to_device(*gpu, DType::F32);
    }
    return {"one UNet call, batch " + std::to_string(b) + (b == 2 ? " (one image with guidance)" : "") + ", latents " +
                size_str(w, h) + ", context 77 tokens",
            [&m, &in, gpu] {
                StageScope zone(Stage::DenoiseStep);
                const Backend::RecordedFn call = [&m](const std::vector<const Tensor*>& t) {
                    return m.unet->forward(UNetInputs::from_list(t));
                };
                UNetInputs u{&in.sample, &in.timesteps, &in.context};
                if (!in.text_embeds.empty()) {
                    u.text_embeds = &in.text_embeds;
                    u.time_ids = &in.time_ids;
                }
                const std::vector<const Tensor*> inputs = u.list();
                if (!gpu) {
                    call(inputs);
                    return;
                }
                gpu->run_recorded("bench unet of model " + std::to_string(m.serial) + " " + shape_str(in.sample.shape()), inputs, call);
                gpu->synchronize();  // the time of the work, not of queueing it
            }};
}

SuiteRun make_vae_run(const StableDiffusionModel& m, const SuiteSettings& s, bool decode, Tensor& input,
                      bool tiled = false) {
    require(m.vae != nullptr, ErrorKind::InvalidArgument, "the vae suites need the model's VAE");
    const VaeConfig& c = m.vae->config();
    const int f = c.downsample_factor();
    require(s.width % f == 0 && s.height % f == 0, ErrorKind::InvalidArgument,
            "width and height must be multiples of the VAE's factor " + std::to_string(f));
    auto rng = make_noise_generator("cpu", 2);
    if (decode) {
        input = rng->randn({s.batch, c.latent_channels, s.height / f, s.width / f});
        Backend* gpu = gpu_of(m);
        if (gpu) input = input.to_device(*gpu, DType::F32);
        return {std::string(tiled ? "VAE decode in bands of " : "VAE decode of ") + std::to_string(s.batch) +
                    " latent(s) " + size_str(s.width / f, s.height / f) + " to " + size_str(s.width, s.height) +
                    " pixels",
                [&m, &input, gpu, tiled, s] {
                    StageScope zone(Stage::VaeDecode);
                    if (tiled) {  // eager, and back on the host when it returns
                        const int f = m.vae->config().downsample_factor();
                        const bool on_device =
                            s.vae_park == "device" ||
                            (s.vae_park == "auto" && gpu &&
                             tiled_decode_fits_device(m, int(input.dim(3)) * f, int(input.dim(2)) * f,
                                                      int(input.dim(0))));
                        m.vae->decode_tiled(input, default_vae_band_bytes(gpu != nullptr), on_device);
                        return;
                    }
                    if (!gpu) {
                        m.vae->decode(input);
                        return;
                    }
                    gpu->run_recorded("bench vae decode of model " + std::to_string(m.serial) + " " + shape_str(input.shape()), {&input},
                                      [&m](const std::vector<const Tensor*>& t) { return m.vae->decode(*t[0]); });
                    gpu->synchronize();
                }};
    }
    input = rng->randn({s.batch, c.in_channels, s.height, s.width});
    for (int64_t i = 0; i < input.numel(); ++i) input[i] = std::tanh(input[i]);  // an image's range, [-1, 1]
    return {"VAE encode of " + std::to_string(s.batch) + " image(s) " + size_str(s.width, s.height),
            [&m, &input] {
                StageScope zone(Stage::VaeEncode);
                m.vae->encode(input);
            }};
}

SuiteRun make_txt2img_run(const StableDiffusionModel& m, const SuiteSettings& s, GenerationRequest& req) {
    require(m.unet && m.vae && !m.text_encoders.empty(), ErrorKind::InvalidArgument,
            "the txt2img suite needs the whole model");
    require(s.batch == 1, ErrorKind::InvalidArgument,
            "the txt2img suite makes one image (its UNet batch is 2 with guidance); --batch " + std::to_string(s.batch) +
                " applies to the unet, text and vae suites");
    req.prompt = kPrompt;
    req.width = s.width;
    req.height = s.height;
    req.steps = s.steps;
    req.seed = 42;
    req.vram_budget = s.vram_budget;
    // What the generation says of its memory (a plan that leaves weights off the device, a retry after running out)
    // goes to stderr as kiln txt2img says it, each line once: a bench that fell back to a leaner plan says so.
    req.notice = [said = std::make_shared<std::set<std::string>>()](const std::string& line) {
        if (said->insert(line).second) std::fprintf(stderr, "kiln: %s\n", line.c_str());
    };
    validate_request(req);
    return {"txt2img " + size_str(s.width, s.height) + ", " + std::to_string(s.steps) + " steps of " +
                default_sampler(m) + " with guidance 7.5 (UNet batch 2), text encode and VAE decode",
            [&m, &req] { generate(m, req); }};
}

double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

BenchSuite parse_bench_suite(const std::string& name) {
    if (name == "unet") return BenchSuite::Unet;
    if (name == "text") return BenchSuite::Text;
    if (name == "vae-decode") return BenchSuite::VaeDecode;
    if (name == "vae-decode-tiled") return BenchSuite::VaeDecodeTiled;
    if (name == "vae-encode") return BenchSuite::VaeEncode;
    if (name == "txt2img") return BenchSuite::Txt2img;
    fail(ErrorKind::InvalidArgument,
         "unknown bench suite '" + name + "' (unet, text, vae-decode, vae-decode-tiled, vae-encode, txt2img; or quality)");
}

const char* bench_suite_name(BenchSuite suite) {
    switch (suite) {
        case BenchSuite::Unet: return "unet";
        case BenchSuite::Text: return "text";
        case BenchSuite::VaeDecode: return "vae-decode";
        case BenchSuite::VaeDecodeTiled: return "vae-decode-tiled";
        case BenchSuite::VaeEncode: return "vae-encode";
        case BenchSuite::Txt2img: return "txt2img";
    }
    return "?";
}

SyntheticParts parts_for(const std::vector<BenchSuite>& suites) {
    SyntheticParts p;
    p.text = p.unet = p.vae = false;
    for (BenchSuite s : suites) {
        p.text = p.text || s == BenchSuite::Text || s == BenchSuite::Txt2img;
        p.unet = p.unet || s == BenchSuite::Unet || s == BenchSuite::Txt2img;
        p.vae = p.vae || s == BenchSuite::VaeDecode || s == BenchSuite::VaeDecodeTiled ||
                 s == BenchSuite::VaeEncode || s == BenchSuite::Txt2img;
    }
    // Only vae-encode encodes: txt2img is measured as `kiln txt2img` runs, without the encoder's weights.
    p.vae_encoder = std::find(suites.begin(), suites.end(), BenchSuite::VaeEncode) != suites.end();
    return p;
}

BenchSuiteResult run_bench_suite(const StableDiffusionModel& m, BenchSuite suite, const SuiteSettings& s) {
    require(s.width > 0 && s.height > 0 && s.width % 8 == 0 && s.height % 8 == 0 && s.width <= 8192 &&
                s.height <= 8192,
            ErrorKind::InvalidArgument,
            "width and height must be positive multiples of 8 up to 8192, not " + size_str(s.width, s.height));
    require(s.batch >= 1 && s.batch <= 64, ErrorKind::InvalidArgument,
            "batch must be between 1 and 64, not " + std::to_string(s.batch));
    require(s.warmup >= 0 && s.warmup <= 1000, ErrorKind::InvalidArgument, "warmup must be between 0 and 1000");
    require(s.repeats >= 1 && s.repeats <= 10000, ErrorKind::InvalidArgument, "repeats must be between 1 and 10000");

    UnetInputs unet_in;
    Tensor vae_in;
    GenerationRequest req;
    SuiteRun work;
    switch (suite) {
        case BenchSuite::Text: work = make_text_run(m, s); break;
        case BenchSuite::Unet: work = make_unet_run(m, s, unet_in); break;
        case BenchSuite::VaeDecode: work = make_vae_run(m, s, true, vae_in); break;
        case BenchSuite::VaeDecodeTiled: work = make_vae_run(m, s, true, vae_in, true); break;
        case BenchSuite::VaeEncode: work = make_vae_run(m, s, false, vae_in); break;
        case BenchSuite::Txt2img: work = make_txt2img_run(m, s, req); break;
    }

    BenchSuiteResult r;
    r.suite = bench_suite_name(suite);
    r.description = work.description;
    reset_memory_peaks();
    reset_process_peak_rss();  // if the system refuses, max RSS is the process's lifetime peak
    r.memory_start_bytes = memory_stats().device("cpu").total.current;

    // A profile (--profile, --trace) covers the timed runs: the warm-ups choose algorithms and record graphs.
    Profiler* profiler = detail::active_profiler();
    if (profiler) profiler->pause(true);
    for (int i = 0; i < s.warmup; ++i) work.run();
    if (profiler) profiler->pause(false);
    const double cpu0 = process_cpu_seconds();
    for (int i = 0; i < s.repeats; ++i) {
        FlopCounter flops;
        const double t0 = now_seconds();
        work.run();
        r.seconds.push_back(now_seconds() - t0);
        r.flops = flops.flops();  // the same every run (a replayed CUDA graph reports its recording's)
    }

    r.cpu_seconds = (process_cpu_seconds() - cpu0) / s.repeats;
    const DeviceMemoryStats mem = memory_stats().device("cpu");
    r.stats = timing_stats(r.seconds);
    r.peak_device_bytes = mem.total.peak;
    if (Backend* gpu = gpu_of(m)) {  // tensors' peak on the GPU; the allocator's hold is the device's view
        r.peak_device_bytes = memory_stats().device(device_name(m.device)).total.peak;
        r.description += "; GPU allocator holds " + std::to_string(gpu->reserved_bytes() >> 20) + " MiB";
    }
    r.peak_host_bytes = mem.total.peak;  // the CPU backend's device is the host
    for (int k = 0; k < kMemoryCategoryCount; ++k) r.peak_by_category[k] = mem.categories[k].peak;
    r.memory_end_bytes = mem.total.current;
    r.max_rss_bytes = process_peak_rss_bytes();
    return r;
}

}  // namespace kiln::cli
