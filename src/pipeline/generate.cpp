#include "pipeline/generate.h"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "kiln/error.h"
#include "core/backend.h"
#include "pipeline/composable_guidance.h"
#include "pipeline/conditioning.h"
#include "pipeline/gpu_memory_plan.h"
#include "pipeline/memory_check.h"
#include "pipeline/memory_plan.h"
#include "pipeline/vram_budget.h"
#include "rng/noise_generator_factory.h"
#include "runtime/process_usage.h"
#include "runtime/profiler.h"
#include "sampling/sampler_names.h"
#include "sampling/sampling_loop.h"

namespace kiln {

namespace {

// Whether every value is a number (not NaN, not infinite); a check before an error whose message is built once.
bool all_finite(const Tensor& t) {
    return std::all_of(t.values().begin(), t.values().end(), [](float v) { return std::isfinite(v); });
}

// Beyond this the activations of one UNet call no longer fit any machine kiln runs on.
constexpr int kMaxSide = 8192;
// AUTOMATIC1111's UI offers batch sizes up to 8; beyond 64 a batch is better made with --batch-count.
constexpr int kMaxBatch = 64;

// Each row of a [B, ...] tensor n times in a row: [r0 x n, r1 x n, ...], as diffusers repeats each prompt's
// embedding for num_images_per_prompt (so [negative, positive] becomes n negatives, then n positives).
Tensor repeat_rows(const Tensor& t, int n) {
    if (n == 1 || t.empty()) return t;
    Shape s = t.shape();
    const int64_t row = t.numel() / s[0];
    s[0] *= n;
    Tensor out(s);
    for (int64_t r = 0; r < t.dim(0); ++r)
        for (int i = 0; i < n; ++i) std::copy_n(t.data() + r * row, row, out.data() + (r * n + i) * row);
    return out;
}

std::string format_double(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

}  // namespace

void validate_request(const GenerationRequest& r) {
    for (auto [name, v] : {std::pair{"width", r.width}, std::pair{"height", r.height}}) {
        require(v > 0 && v % 8 == 0, ErrorKind::InvalidArgument,
                std::string(name) + " " + std::to_string(v) + " is not a positive multiple of 8");
        require(v <= kMaxSide, ErrorKind::InvalidArgument,
                std::string(name) + " " + std::to_string(v) + " is larger than kiln's limit of " +
                    std::to_string(kMaxSide));
    }
    require(r.steps >= 1 && r.steps <= 1000, ErrorKind::InvalidArgument,
            "steps must be between 1 and 1000, not " + std::to_string(r.steps));
    require(r.cfg_scale >= 0 && r.cfg_scale < 1000, ErrorKind::InvalidArgument, "CFG scale out of range");
    require(r.clip_skip >= 1 && r.clip_skip <= 12, ErrorKind::InvalidArgument, "clip skip must be between 1 and 12");
    require(r.batch_size >= 1 && r.batch_size <= kMaxBatch, ErrorKind::InvalidArgument,
            "batch size must be between 1 and " + std::to_string(kMaxBatch) + ", not " + std::to_string(r.batch_size));
    require(r.rng == "cpu" || r.rng == "cuda", ErrorKind::InvalidArgument, "rng must be cpu or cuda, not " + r.rng);
    if (r.init_image)
        require(r.strength > 0 && r.strength <= 1, ErrorKind::InvalidArgument,
                "strength must be in (0, 1], not " + format_double(r.strength));
}

int default_image_size(const StableDiffusionModel& model) {
    if (model.unet && model.vae && model.unet->config().sample_size > 0)
        return model.unet->config().sample_size * model.vae->config().downsample_factor();
    switch (model.arch) {
        case Architecture::SD1: return 512;
        case Architecture::SD2: {
            const nlohmann::json& p = model.scheduler_config.contains("prediction_type")
                                          ? model.scheduler_config["prediction_type"]
                                          : nlohmann::json();
            return p.is_string() && p.get<std::string>() == "v_prediction" ? 768 : 512;
        }
        case Architecture::SDXL: return 1024;
    }
    return 512;
}

std::string default_sampler(const StableDiffusionModel& model) {
    const nlohmann::json& config = model.scheduler_config;
    const std::string cls = config.contains("_class_name") && config["_class_name"].is_string()
                                ? config["_class_name"].get<std::string>()
                                : std::string("PNDMScheduler");
    static const std::pair<const char*, const char*> kByClass[] = {
        {"DDIMScheduler", "ddim"}, {"PNDMScheduler", "pndm"}, {"EulerDiscreteScheduler", "euler"},
        {"EulerAncestralDiscreteScheduler", "euler_a"}, {"HeunDiscreteScheduler", "heun"},
        {"LMSDiscreteScheduler", "lms"}, {"DPMSolverMultistepScheduler", "dpmpp_2m"},
        {"UniPCMultistepScheduler", "unipc"}, {"LCMScheduler", "lcm"}};
    for (const auto& [c, name] : kByClass)
        if (cls == c) {
            const bool karras = config.contains("use_karras_sigmas") && config["use_karras_sigmas"].is_boolean() &&
                                config["use_karras_sigmas"].get<bool>();
            return karras && std::string(name) == "dpmpp_2m" ? "dpmpp_2m_karras" : name;
        }
    fail(ErrorKind::Unsupported, "the model's scheduler " + cls + " (choose one with --sampler)");
}

namespace {

// One generation with the weights placed by `gpu_plan` on a GPU, and on the CPU by `cpu_plan` (each ignored on
// the other). `gpu_stage`, where given, follows the GPU stage the generation is in ("text_encode", "denoise", ...),
// so that a caller knows where one that threw was.
GenerationResult generate_with(const StableDiffusionModel& model, const GenerationRequest& r,
                               const GpuMemoryPlan& gpu_plan, const MemoryPlan& cpu_plan,
                               std::string* gpu_stage = nullptr) {
    require(!r.init_image || model.vae->has_encoder(), ErrorKind::InvalidArgument,
            "img2img needs the VAE encoder, and the model was loaded without it (LoadOptions::vae_encoder)");
    SamplingRequest sampling;
    sampling.sampler = r.sampler.empty() ? default_sampler(model) : r.sampler;
    sampling.steps = r.steps;
    sampling.timestep_spacing = r.timestep_spacing.value_or("");
    std::unique_ptr<NoiseGenerator> rng = make_noise_generator(r.rng, r.seed);

    // On the CPU, the weights read in place from the mapped file leave the resident set after their stage,
    // and inside each UNet call when the budget needs it (memory_plan.h).
    Backend* gpu = model.device.is_cpu() ? nullptr : &backend_for(model.device);
    const MemoryPlan plan = gpu ? MemoryPlan{} : cpu_plan;
    const bool stream_on_gpu = gpu && gpu_plan.weights == GpuWeightPlacement::Streamed;
    // KILN_PLAN_CHECK=1: each stage's measured peak of kiln's device tensors beside the plan's figure, on stderr
    // (to check the estimates in gpu_memory_plan.cpp).
    const bool plan_check = gpu && std::getenv("KILN_PLAN_CHECK") != nullptr;
    const MemoryDevice device_memory = gpu ? memory_device(device_name(model.device)) : kCpuDevice;
    std::string last_stage;
    auto report_stage = [&] {
        if (!plan_check || last_stage.empty()) return;
        int64_t predicted = -1;
        for (const StageEstimate& e : gpu_plan.stages)
            if (e.stage == last_stage) predicted = e.total(0);
        // In bytes too: the test fixtures' stages are a few MiB, where whole MiB hide a difference.
        const int64_t measured = memory_window_peak(device_memory);
        std::fprintf(stderr, "kiln plan check: %s (%s): measured %s, predicted %s (bytes: %lld, %lld)\n",
                     last_stage.c_str(), gpu_weight_placement_name(gpu_plan.weights), format_mib(measured).c_str(),
                     predicted < 0 ? "-" : format_mib(predicted).c_str(), (long long)measured, (long long)predicted);
    };
    auto place_for = [&](const char* stage) {
        if (!gpu) return;
        report_stage();
        if (gpu_stage) *gpu_stage = stage;
        place_weights_for_stage(model, gpu_plan, stage);
        last_stage = stage;
        if (plan_check) reset_memory_window(device_memory);
    };
    const std::function<void(const std::string&)> bring_block = [&](const std::string& b) { model.unet->stream_in(b); };
    const std::function<void(const std::string&)> send_block = [&](const std::string& b) { model.unet->stream_out(b); };
    const std::function<void(const std::string&)> drop_block = [&](const std::string& block) {
        model.unet->pages().drop(block);
    };
    // The VAE (an img2img's encode, the decode) in bands where a budget's plan says so, in bands of what its
    // weights leave of a --vram budget (parked on the host).
    const VaeTiling vae_tiling = plan.vae_tiled || gpu_plan.vae_tiled ? VaeTiling::On : r.vae_tiling;
    const int64_t vae_band = gpu && r.vram_budget > 0
                                 ? std::clamp<int64_t>((r.vram_budget - model.vae->device_weights().bytes()) / 3,
                                                       int64_t(8) << 20, default_vae_band_bytes(true))
                                 : 0;
    if (r.notice && (plan.stream_unet || (plan.vae_tiled && r.vae_tiling == VaeTiling::Auto)))
        r.notice("--memory " + format_mib(r.memory_budget) + ": " +
                 (plan.stream_unet ? "the UNet's weights are read from the file block by block in each step" : "") +
                 (plan.stream_unet && plan.vae_tiled ? ", and " : "") +
                 (plan.vae_tiled ? "the VAE works in bands" : "") + " (predicted peak " + format_mib(plan.peak()) +
                 ")");

    // diffusers guides only when guidance_scale > 1.
    const bool cfg = r.cfg_scale > 1.0f;
    PromptEncodingOptions prompt_options;
    prompt_options.syntax = r.prompt_syntax;
    prompt_options.clip_skip = r.clip_skip;
    prompt_options.schedule_steps = a1111_schedule_steps(sampling.sampler, r.steps);
    prompt_options.embeddings = r.embeddings;
    prompt_options.emphasis = r.emphasis;
    std::vector<std::string> used_embeddings;
    prompt_options.used_embeddings = &used_embeddings;
    bool texts_with_brackets = false;
    prompt_options.texts_with_brackets = &texts_with_brackets;
    // Prompt editing makes the conditioning change with the model call (conditioning.h).
    place_for("text_encode");
    const ConditioningSchedule schedule = encode_conditioning_schedule(
        model, r.prompt, r.negative_prompt, cfg, prompt_options, r.width, r.height, r.notice);
    for (const TextEncoder& te : model.text_encoders) te.model.pages().drop();
    const int n = r.batch_size;
    const Shape latent_shape{n, 4, r.height / 8, r.width / 8};

    // On a GPU the conditioning goes there once; each UNet call moves only its latents and timestep, and runs
    // as a recorded call (a CUDA graph from the second step on).
    auto to_model = [&](const Tensor& t, DType dtype) { return gpu ? t.to_device(*gpu, dtype) : t; };
    const bool sdxl = model.arch == Architecture::SDXL;
    auto prepare = [&](const Conditioning& c) {
        Conditioning d;
        d.context = to_model(repeat_rows(c.context, n), model.precision);
        if (sdxl) {
            d.text_embeds = to_model(repeat_rows(c.text_embeds, n), model.precision);
            d.time_ids = to_model(repeat_rows(c.time_ids, n), DType::F32);
        }
        return d;
    };
    std::vector<CallConditioning> conditioning;
    for (const CallConditioning& part : schedule.parts)
        conditioning.push_back({prepare(part.joint), part.negative ? std::optional(prepare(*part.negative)) : std::nullopt});
    const Backend::RecordedFn unet_call = [&](const std::vector<const Tensor*>& t) {
        return model.unet->forward(UNetInputs::from_list(t));
    };

    // Classifier-free guidance on the host: [negatives, each AND part's rows] -> negative + scale (positive -
    // negative), summed over the parts with their weights (composable_guidance.h).
    const int and_parts = static_cast<int>(schedule.and_weights.size());
    auto guide = [&](const Tensor& out) {
        return combine_composable_guidance(out, n, schedule.and_weights, r.cfg_scale);
    };

    // One UNet evaluation of latents x (host) on conditioning c; the output on the host.
    auto unet = [&](const Tensor& x, float t, const Conditioning& c) {
        const Tensor input = to_model(x, model.precision);
        const Tensor timesteps = to_model(Tensor({x.dim(0)}, std::vector<float>(x.dim(0), t)), DType::F32);
        UNetInputs in{&input, &timesteps, &c.context};
        if (plan.stream_unet) in.after_block = &drop_block;
        if (stream_on_gpu) {
            in.before_block = &bring_block;
            in.after_block = &send_block;
        }
        if (sdxl) {
            in.text_embeds = &c.text_embeds;
            in.time_ids = &c.time_ids;
        }
        Tensor out;
        if (!gpu) {
            out = model.unet->forward(in);
        } else if (stream_on_gpu) {
            out = model.unet->forward(in).to_host();  // weights move inside it: not recordable
        } else {
            const std::vector<const Tensor*> inputs = in.list();
            const std::string key = unet_recording_key_prefix(model) + shape_str(input.shape()) +
                                    " context " + shape_str(c.context.shape());
            out = gpu->run_recorded(key, inputs, unet_call).to_host();
        }
        if (r.unet_observer) r.unet_observer(in, out);
        return out;
    };

    // The webui's denoiser counts its calls (not steps) against the prompt-editing schedule.
    int call = 0;
    Denoiser denoise = [&](const Tensor& x, float t) {
        StageScope zone(Stage::DenoiseStep);  // one UNet evaluation (Heun makes two per step)
        const CallConditioning& c = conditioning.at(schedule.part_for_call(call++));
        if (!schedule.guided) return unet(x, t, c.joint);
        if (!c.negative) return guide(unet(repeat_batch(x, and_parts + 1), t, c.joint));
        // The prompts' contexts differ in length: the negative and the positive rows run apart.
        return guide(concat_batch(unet(x, t, *c.negative), unet(repeat_batch(x, and_parts), t, c.joint)));
    };

    // Host RAM; a GPU reports its own out-of-memory.
    if (!gpu)
        check_memory_for(model, r.width, r.height, n, r.vae_tiling != VaeTiling::Off,
                         and_parts + (schedule.guided ? 1 : 0));  // the rows unet() above runs
    GenerationResult result;
    result.used_embeddings = used_embeddings;
    if (r.prompt_syntax == PromptSyntax::A1111 && r.emphasis != EmphasisMode::Original && texts_with_brackets)
        result.emphasis = emphasis_mode_label(r.emphasis);
    if (!r.init_image) {
        place_for("denoise");
        Tensor noise = rng->randn(latent_shape);
        result.final_latent = sample_latents(sampling, model.scheduler_config, noise, *rng, denoise, r.progress);
    } else {
        const Tensor& img = *r.init_image;
        require(img.rank() == 4 && img.dim(0) == 1 && img.dim(1) == 3 && img.dim(2) == r.height &&
                    img.dim(3) == r.width,
                ErrorKind::InvalidArgument,
                "init image of shape " + shape_str(img.shape()) + " does not match " + std::to_string(r.width) + "x" +
                    std::to_string(r.height));
        require(all_finite(img), ErrorKind::InvalidArgument, "the init image contains NaN or infinite values");
        Tensor scaled(img.shape());
        for (int64_t i = 0; i < img.numel(); ++i) scaled[i] = img[i] * 2.0f - 1.0f;
        // diffusers draws the posterior sample first, then the noise added at the first timestep.
        Vae::Posterior posterior = [&] {
            StageScope zone(Stage::VaeEncode);
            place_for("vae_encode");
            Vae::Posterior p = encode_image(model, scaled, vae_tiling, r.notice, vae_band);
            model.vae->pages().drop();
            return p;
        }();
        Tensor eps = rng->randn(posterior.mean.shape());
        Tensor one_latent(posterior.mean.shape());
        for (int64_t i = 0; i < eps.numel(); ++i)
            one_latent[i] = (posterior.mean[i] + posterior.std[i] * eps[i]) * model.vae_scale;
        // diffusers encodes the image once and repeats its latents for each image of the batch; the noise
        // added at the first timestep is then drawn for the whole batch.
        Tensor init_latents = repeat_rows(one_latent, n);
        sampling.img2img = true;
        place_for("denoise");
        sampling.strength = r.strength;
        result.final_latent =
            sample_latents(sampling, model.scheduler_config, init_latents, *rng, denoise, r.progress);
    }

    // Weights with NaNs, or arithmetic that overflows, must not pass silently as a black picture.
    model.unet->pages().drop();
    if (!all_finite(result.final_latent))
        fail(ErrorKind::InvalidModel,
             "the sampled latents contain NaN or infinite values (corrupt weights, or settings such as the CFG "
             "scale that make the model's arithmetic overflow)");
    {
        StageScope zone(Stage::VaeDecode);
        // On the CPU, the UNet's activations are freed but, kept in the heap for the next step's, still
        // resident; the decode's tensors are larger (256 MiB at 512x512) and would mostly land beside them, not
        // in them. (On a GPU the host heap holds little, and trimming it cost 0.5 ms.)
        if (!gpu) release_free_heap_memory();
        Tensor latents = result.final_latent;
        // diffusers divides (latents / scaling_factor); times the rounded reciprocal is 1 ulp off in
        // about one element in five.
        for (int64_t i = 0; i < latents.numel(); ++i) latents[i] = latents[i] / model.vae_scale;
        place_for("vae_decode");
        // Under a budget's plan that keeps the UNet on the device through the decode, a whole decode that runs out
        // first places the weights as each component in its stage would (the UNet and text encoders leave; the next
        // image's stages bring them back), as later images' plans then do: a decode in bands costs more than that
        // (plan_for_the_decode).
        const std::function<std::string()> room_for_the_decode = [&]() -> std::string {
            if (!gpu || r.vram_budget < 0 || !model.unet || model.unet->device_weights().resident_bytes() == 0 ||
                (gpu_plan.weights != GpuWeightPlacement::Resident && gpu_plan.weights != GpuWeightPlacement::Stages))
                return "";
            GpuMemoryPlan each_stage = gpu_plan;
            each_stage.weights = GpuWeightPlacement::EachStage;
            place_weights_for_stage(model, each_stage, "vae_decode");
            backend_for(model.device).release_cached_memory();
            return "the UNet's weights left the device";
        };
        Tensor decoded = decode_latents(model, latents, vae_tiling, r.notice, vae_band,
                                        gpu_plan.vae_tiled && r.vae_tiling != VaeTiling::On,
                                        &result.vae_decode_ran_out, room_for_the_decode);
        model.vae->pages().drop();
        if (gpu) report_stage();
        // A reduced-precision VAE that overflowed gives NaN or infinity, which would be a black picture.
        // (SDXL's VAE, the one known to overflow fp16, runs in bfloat16 or float32: their range is float32's.)
        // (The message is built once, after the scan: built per pixel it cost 75 ms of a 512x512 image.)
        // One pass for both, on every core, written so that the compiler vectorises it: two scalar passes
        // through Tensor's checked accessors took 0.8 ms of a 512x512 txt2img on the GPU machine's host.
        uint32_t nonfinite = 0;
        float* pixels = decoded.data();
        const int64_t count = decoded.numel();
#pragma omp parallel for reduction(| : nonfinite) if (count >= (int64_t(1) << 18))
        for (int64_t i = 0; i < count; ++i) {
            uint32_t bits;
            std::memcpy(&bits, &pixels[i], 4);
            nonfinite |= (bits & 0x7f800000u) == 0x7f800000u;  // exponent all ones: infinity or NaN
            // max/min in this order keep a NaN a NaN, as std::clamp does.
            pixels[i] = std::min(std::max(pixels[i] / 2.0f + 0.5f, 0.0f), 1.0f);
        }
        if (gpu && nonfinite)
            fail(ErrorKind::Unsupported, "the VAE decode overflowed on " + device_name(model.device) +
                                             " (NaN or infinite pixels); run with --precision fp32");
        result.image = std::move(decoded);
    }
    return result;
}

void notice_plan(const GenerationRequest& r, const GpuMemoryPlan& p) {
    if (r.notice && r.vram_budget >= 0 &&
        (p.weights != GpuWeightPlacement::Resident || (p.vae_tiled && r.vae_tiling == VaeTiling::Auto)))
        r.notice("--vram " + format_mib(r.vram_budget) + ": " + gpu_weight_placement_name(p.weights) +
                 (p.vae_tiled ? "; the VAE decodes in bands" : "") + " (predicted peak " + format_mib(p.peak()) + ")");
}

// The plan later images take after one (not the first of its call: that one also picks algorithms) whose whole VAE
// decode ran out under `plan`: each component on the device only in its stage, the decode whole (what made room for
// the decode: room_for_the_decode in generate_with), where `plan` kept more on the device and that plan's predicted
// peak fits; else `plan` with the decode in bands. A decode in bands costs more than moving the UNet for SD 1.5 (on the
// H200's Vulkan at 512x512: 139 ms parked on the GPU, 956 on the host, 41 whole; a q4_K UNet's upload tens of ms;
// not measured for SDXL, whose fp16 UNet is 5 GB). Under --vram 1G with q4_K weights the whole decode ran out in
// every image, its 843 MiB of tensors finding the cap's free room in pieces (docs/MEMORY.md).
GpuMemoryPlan plan_for_the_decode(const StableDiffusionModel& model, const GenerationRequest& r,
                                  const PlanExtras& extras, const GpuMemoryPlan& plan) {
    const std::vector<GpuMemoryPlan> plans =
        gpu_memory_plans(model, r.width, r.height, r.batch_size, r.vae_tiling, extras);
    auto next = std::find_if(plans.begin(), plans.end(), [&](const GpuMemoryPlan& p) {
        return plan.weights < GpuWeightPlacement::EachStage && p.weights == GpuWeightPlacement::EachStage &&
               !p.vae_tiled && p.peak() <= r.vram_budget;
    });
    if (next == plans.end())
        next = std::find_if(plans.begin(), plans.end(),
                            [&](const GpuMemoryPlan& p) { return p.weights == plan.weights && p.vae_tiled; });
    if (next == plans.end()) return plan;
    if (r.notice)
        r.notice(std::string("the VAE decode ran out of memory with ") + gpu_weight_placement_name(plan.weights) +
                 "; the next images: " + gpu_weight_placement_name(next->weights) +
                 (next->vae_tiled ? ", the VAE in bands" : ", the VAE decode whole"));
    return *next;
}

// A GPU generation under r.vram_budget (none: every weight resident): the plan, and where the device runs out under
// a budget all the same, each leaner plan in turn.
GenerationResult generate_planned(const StableDiffusionModel& model, const GenerationRequest& r,
                                  const PlanExtras& extras) {
    GpuMemoryPlan plan =
        plan_gpu_memory(model, r.width, r.height, r.batch_size, r.vram_budget, r.vae_tiling, extras);
    // A placement that ran out of memory is not tried again for the same call (--batch-count, a bench), unless
    // it ran out in the call's first generation: that one also picks the algorithms, with workspaces the plan
    // does not count, and later ones may fit (SD 1.5 in --vram 1G: the whole decode fits from the second image
    // on, 0.96 s against 1.7 s in bands).
    static std::mutex remembered_mutex;  // generations may run on several threads (a server's)
    static std::map<std::string, GpuMemoryPlan> worked;
    static std::set<std::string> done_once;
    const std::string key = std::to_string(model.serial) + " " + std::to_string(r.width) + "x" +
                            std::to_string(r.height) + " " + std::to_string(r.batch_size) + " " +
                            std::to_string(r.vram_budget) + " " + vae_tiling_name(r.vae_tiling) + " rows " +
                            std::to_string(extras.unet_rows_per_image);
    {
        std::lock_guard lock(remembered_mutex);
        if (auto it = worked.find(key); it != worked.end()) plan = it->second;
    }
    notice_plan(r, plan);
    // The plan's figures are estimates: where the device runs out under the budget all the same, the generation
    // runs again (from the same seed, so to the same image) with each leaner placement in turn.
    for (;;) {
        GenerationResult result;
        std::string stage;
        try {
            result = generate_with(model, r, plan, MemoryPlan{}, &stage);
        } catch (const Error& e) {
            if (e.kind() != ErrorKind::OutOfMemory || r.vram_budget < 0) throw;
            const std::vector<GpuMemoryPlan> plans =
                gpu_memory_plans(model, r.width, r.height, r.batch_size, r.vae_tiling, extras);
            // Run out while encoding the prompt or denoising, the same placement with the VAE in bands would run out
            // there again (the bands change only the VAE's stages): the next placement is tried instead.
            const bool before_the_vae = stage == "text_encode" || stage == "denoise";
            const GpuMemoryPlan* next = nullptr;
            for (const GpuMemoryPlan& p : plans)
                if (p.weights > plan.weights ||
                    (!before_the_vae && p.weights == plan.weights && p.vae_tiled && !plan.vae_tiled)) {
                    next = &p;
                    break;
                }
            if (!next) throw;
            if (r.notice)
                r.notice(std::string("out of device memory with ") + gpu_weight_placement_name(plan.weights) +
                         (plan.vae_tiled ? ", the VAE in bands" : "") + " (" + e.what() + "); trying " +
                         gpu_weight_placement_name(next->weights) + (next->vae_tiled ? ", the VAE in bands" : ""));
            plan = *next;
            continue;
        }
        if (r.vram_budget < 0) return result;
        bool later;
        {
            std::lock_guard lock(remembered_mutex);
            later = !done_once.insert(key).second;
        }
        if (!later) return result;
        GpuMemoryPlan next = plan;
        if (result.vae_decode_ran_out) {
            try {
                next = plan_for_the_decode(model, r, extras, plan);
            } catch (const Error&) {
                // The image is made: a plan for the next ones that cannot be made keeps the one that worked.
            }
        }
        std::lock_guard lock(remembered_mutex);
        worked[key] = next;
        return result;
    }
}

// Every weight of the model off its GPU, kept in host memory (DeviceWeights::offload, which forgets the recordings
// naming them), and the memory the backend caches: what a load with LoadOptions::offload_weights leaves.
void offload_model(const StableDiffusionModel& model) {
    for (const TextEncoder& te : model.text_encoders) te.model.device_weights().offload();
    if (model.unet) model.unet->device_weights().offload();
    if (model.vae) model.vae->device_weights().offload();
    backend_for(model.device).release_cached_memory();
}

// A generation under `budget` bytes, the backend capped to it for this generation only (or to the caller's own cap
// where that is lower), the previous cap given back after it.
GenerationResult generate_capped(const StableDiffusionModel& model, const GenerationRequest& r,
                                 const PlanExtras& extras, int64_t budget) {
    Backend& backend = backend_for(model.device);
    const int64_t previous = backend.memory_limit();
    const int64_t cap = previous > 0 ? std::min(previous, budget) : budget;
    backend.set_memory_limit(cap);
    struct Restore {
        Backend& backend;
        int64_t previous;
        ~Restore() { backend.set_memory_limit(previous); }
    } restore{backend, previous};
    GenerationRequest budgeted = r;
    budgeted.vram_budget = cap;
    return generate_planned(model, budgeted, extras);
}

// Whether an OutOfMemory is the model's GPU's (the allocators name their device first: "cuda:0: ..."), not the
// host's.
bool device_ran_out(const Error& e, const Device& device) {
    return e.kind() == ErrorKind::OutOfMemory && std::string(e.what()).find(device_name(device) + ":") != std::string::npos;
}

// Without a budget every weight stays on the GPU. Where the device runs out all the same (a model larger than the card,
// another process's memory), the weights leave it in place and the generation runs again under the budget --vram auto
// gives, as do this model's later generations (the budget remembered, so that their plans are the ones that
// worked): their plans keep resident whatever fits. A failure there is the error.
GenerationResult generate_fitting(const StableDiffusionModel& model, const GenerationRequest& r,
                                  const PlanExtras& extras) {
    static std::mutex fitted_mutex;
    static std::map<uint64_t, int64_t> fitted;  // StableDiffusionModel::serial -> the budget it runs under
    std::optional<int64_t> known;
    {
        std::lock_guard lock(fitted_mutex);
        if (auto it = fitted.find(model.serial); it != fitted.end()) known = it->second;
    }
    if (known) return generate_capped(model, r, extras, *known);
    try {
        return generate_planned(model, r, extras);
    } catch (const Error& e) {
        if (!device_ran_out(e, model.device)) throw;
        Backend& backend = backend_for(model.device);
        VramBudget fit;
        try {  // auto counts what kiln holds as its own, so it is the same before the weights leave as after
            fit = resolve_vram_budget("auto", backend);
        } catch (const Error&) {
            throw e;  // the margin leaves nothing: the device's own error is the one to see
        }
        if (r.notice) {
            r.notice(std::string("out of device memory with every weight on ") + device_name(model.device) + " (" +
                     e.what() + "); trying again with the weights off the device, under --vram auto");
            r.notice(fit.describe(device_name(model.device)));
        }
        offload_model(model);
        GenerationResult result = generate_capped(model, r, extras, fit.bytes);
        std::lock_guard lock(fitted_mutex);
        fitted[model.serial] = fit.bytes;
        return result;
    }
}

}  // namespace

GenerationResult generate(const StableDiffusionModel& model, const GenerationRequest& r) {
    validate_request(r);
    PlanExtras extras;  // a prompt's AND parts add UNet rows
    extras.unet_rows_per_image = unet_rows_per_image(r.prompt, r.prompt_syntax, r.cfg_scale > 1.0f);
    if (model.device.is_cpu()) {
        // Where the host runs out all the same (a cgroup's or ulimit's cap, the plan's estimates short), the
        // generation runs again once, from the same seed, with the leanest configuration the tiling allows: the
        // UNet's pages read block by block, the VAE in bands. Both give the same image on the CPU.
        const MemoryPlan first =
            plan_cpu_memory(model, r.width, r.height, r.batch_size, r.memory_budget, r.vae_tiling, extras);
        try {
            return generate_with(model, r, GpuMemoryPlan{}, first);
        } catch (const Error& e) {
            if (e.kind() != ErrorKind::OutOfMemory) throw;
            const MemoryPlan leanest =
                cpu_memory_plans(model, r.width, r.height, r.batch_size, r.vae_tiling, first.fixed, extras).back();
            if (first.stream_unet == leanest.stream_unet && first.vae_tiled == leanest.vae_tiled) throw;
            if (r.notice)
                r.notice(std::string("out of memory (") + e.what() + "); trying again with " +
                         (leanest.stream_unet ? "the UNet's weights read block by block" : "") +
                         (leanest.stream_unet && leanest.vae_tiled ? " and " : "") +
                         (leanest.vae_tiled ? "the VAE in bands" : ""));
            return generate_with(model, r, GpuMemoryPlan{}, leanest);
        }
    }
    // On a GPU, a --vram budget decides where the weights are at each stage (gpu_memory_plan.h).
    if (!r.gpu_weights.empty())
        return generate_with(model, r,
                             gpu_memory_plan_with(model, r.width, r.height, r.batch_size,
                                                  parse_gpu_weight_placement(r.gpu_weights), r.vae_tiling, extras),
                             MemoryPlan{});
    if (r.vram_budget >= 0 || !r.fit_on_out_of_memory) return generate_planned(model, r, extras);
    return generate_fitting(model, r, extras);
}

}  // namespace kiln
