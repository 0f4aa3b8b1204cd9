// `kiln txt2img` and `kiln img2img`.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <random>

#include "commands.h"
#include "image/infotext.h"
#include "image/png.h"
#include "image/sha256.h"
#include "image/utf8.h"
#include "io/safetensors.h"
#include "kiln/error.h"
#include "pipeline/generate.h"
#include "pipeline/lora_selection.h"
#include "pipeline/memory_plan.h"
#include "profile_session.h"
#include "progress_bar.h"
#include "runtime/profiler.h"
#include "sampling/sampler_names.h"

namespace fs = std::filesystem;

namespace kiln::cli {

namespace {

std::string output_path(const std::string& base, int index, int count) {
    if (count == 1) return base;
    const fs::path p(base);
    return (p.parent_path() / (p.stem().string() + "-" + std::to_string(index + 1) + p.extension().string())).string();
}

// AUTOMATIC1111 writes integral guidance scales without a fraction ("7") and others as Python does.
std::string format_cfg(double cfg) {
    if (cfg == static_cast<double>(static_cast<int64_t>(cfg))) return format_number(static_cast<int64_t>(cfg));
    return format_number(cfg);
}

// A seed as users write them: 0 .. 2^64-1 (torch takes any 64-bit seed), nothing else.
uint64_t parse_seed(const std::string& text) {
    uint64_t value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    require(ec == std::errc() && end == text.data() + text.size() && !text.empty(), ErrorKind::InvalidArgument,
            "seed '" + text + "' is not -1 or a whole number from 0 to 18446744073709551615");
    return value;
}

// Image `b` of a [N, 3, H, W] batch, as its own [1, 3, H, W] tensor.
Tensor batch_item(const Tensor& images, int64_t b) {
    const int64_t size = images.numel() / images.dim(0);
    return Tensor({1, images.dim(1), images.dim(2), images.dim(3)},
                  std::vector<float>(images.data() + b * size, images.data() + (b + 1) * size));
}

// AUTOMATIC1111's "Lora hashes": "name: hash, ..." per LoRA name (':' and ',' taken out of names), first
// position kept for a name given twice (extensions-builtin/Lora/extra_networks_lora.py).
std::string lora_hashes_parameter(const std::vector<LoraApplication>& loras) {
    std::vector<std::string> names;
    std::string out;
    for (const LoraApplication& l : loras) {
        std::string name;
        for (char c : l.name)
            if (c != ':' && c != ',') name += c;
        if (std::find(names.begin(), names.end(), name) != names.end()) continue;
        names.push_back(name);
        out += (out.empty() ? "" : ", ") + name + ": " + lora_hash(l.path);
    }
    return out;
}

// AUTOMATIC1111's "TI hashes": "name: first 12 hex digits of the file's SHA-256, ..." for the embeddings used
// (the names without ':' and ',').
std::string ti_hashes(const std::vector<TextualInversion>& embeddings, const std::vector<std::string>& used) {
    std::string out;
    for (const std::string& name : used)
        for (const TextualInversion& ti : embeddings) {
            if (ti.name != name) continue;
            std::string clean;
            for (char c : name)
                if (c != ':' && c != ',') clean += c;
            out += (out.empty() ? "" : ", ") + clean + ": " + sha256_file_hex(ti.path).substr(0, 12);
        }
    return out;
}

}  // namespace

int run_generate(const GenerateOptions& o, bool img2img) {
    GenerationRequest req;
    // The prompt ends up in the PNG's UTF-8 text; a terminal in another encoding must fail here,
    // not after the image is made.
    require(is_valid_utf8(o.prompt), ErrorKind::InvalidArgument, "the prompt is not valid UTF-8");
    require(!o.negative || is_valid_utf8(*o.negative), ErrorKind::InvalidArgument,
            "the negative prompt is not valid UTF-8");
    req.prompt = o.prompt;
    req.negative_prompt = o.negative;
    req.width = o.width.value_or(512);
    req.height = o.height.value_or(512);
    req.steps = o.steps;
    req.cfg_scale = static_cast<float>(o.cfg_scale);
    req.clip_skip = o.clip_skip;
    req.prompt_syntax = parse_prompt_syntax(o.prompt_syntax);
    req.emphasis = parse_emphasis_mode(o.emphasis);
    req.batch_size = o.batch_size;
    req.rng = o.rng;
    req.strength = o.strength;
    req.vae_tiling = parse_vae_tiling(o.vae_tiling);
    if (!o.memory.empty()) req.memory_budget = parse_byte_size(o.memory, "--memory");
    req.notice = [](const std::string& line) { std::fprintf(stderr, "kiln: %s\n", line.c_str()); };
    if (!o.timestep_spacing.empty()) req.timestep_spacing = o.timestep_spacing;
    require(o.batch_count >= 1 && o.batch_count <= 10000, ErrorKind::InvalidArgument,
            "batch count must be between 1 and 10000");
    if (!o.sampler.empty()) req.sampler = parse_sampler(o.sampler, o.schedule);
    else require(o.schedule.empty(), ErrorKind::InvalidArgument, "--scheduler needs --sampler");

    Tensor init;
    if (img2img) {
        Image image = read_png(o.init_image);
        if (!o.width) req.width = image.width;  // not given: the init image's own size
        if (!o.height) req.height = image.height;
        require(image.width == req.width && image.height == req.height, ErrorKind::InvalidArgument,
                "init image " + o.init_image + " is " + std::to_string(image.width) + "x" +
                    std::to_string(image.height) + ", not the requested " + std::to_string(req.width) + "x" +
                    std::to_string(req.height) + " (kiln does not resize)");
        init = tensor_from_image(image);
        req.init_image = &init;
    }
    validate_request(req);  // before the (slow) model load
    std::vector<TextualInversion> embeddings;
    if (!o.embeddings_dir.empty()) {
        embeddings = load_embeddings_dir(o.embeddings_dir, req.notice);
        req.embeddings = &embeddings;
    }

    ProfileSession session(o.profile, o.trace);
    LoadOptions load;
    if (!o.prediction.empty()) load.prediction = (o.prediction[0] == 'v') ? "v_prediction" : "epsilon";
    load.weights = weights_option(o.weights);
    const Placement placement = resolve_placement(o.device, o.precision);
    load.device = placement.device;
    load.precision = placement.precision;
    load.vae_encoder = img2img;  // txt2img only decodes
    require(req.memory_budget < 0 || load.device.is_cpu(), ErrorKind::Unsupported,
            "--memory bounds the memory of a CPU run; a GPU's takes --vram");
    const VramBudget vram = apply_vram_limit(o.vram, load.device);
    if (o.vram == "auto") req.notice(vram.describe(device_name(load.device)));  // what auto resolved to
    req.vram_budget = vram.bytes;
    // Under a budget the weights load off the device and come to it by stage or by block (gpu_memory_plan.h).
    load.offload_weights = req.vram_budget >= 0;
    // LoRA: the prompt's tags (AUTOMATIC1111's syntax only; plain prompts are words) and --lora files.
    if (req.prompt_syntax == PromptSyntax::A1111) load.loras = loras_from_prompt(req.prompt, o.lora_dir);
    for (const std::string& arg : o.loras) load.loras.push_back(lora_from_argument(arg));
    load.notice = req.notice;
    load.unet_path = o.unet;
    // A GPU without --vram holds every weight, loaded at once. Where the load runs out of device memory, what it
    // placed goes (its weights, the recordings naming them, the backend's cache) and the model loads again with
    // its weights off the device, to run under --vram auto, whose plan brings them by stage or block (issue 21:
    // out-of-memory is recoverable). Once: a failure under the budget is the error. (A generation that runs out
    // recovers inside generate().)
    StableDiffusionModel model;
    try {
        StageScope zone(Stage::Load);
        model = load_model(o.model, load);
    } catch (const Error& e) {
        if (e.kind() != ErrorKind::OutOfMemory || load.device.is_cpu() || req.vram_budget >= 0) throw;
        req.notice(std::string("out of device memory while loading (") + e.what() +
                   "); loading again with the weights off the device, under --vram auto");
        backend_for(load.device).release_cached_memory();  // what the failed load placed is gone with it
        const VramBudget fit = apply_vram_limit("auto", load.device);
        req.notice(fit.describe(device_name(load.device)));
        req.vram_budget = fit.bytes;
        load.offload_weights = true;
        StageScope zone(Stage::Load);
        model = load_model(o.model, load);
    }
    // AUTOMATIC1111's "Model hash" reads the whole file (about 2 s of CPU for a 2 GB checkpoint) and is
    // needed only when the first PNG is written, so it is computed beside the sampling, not before it: at
    // the lowest priority, so that it takes idle cores (a GPU run's) rather than the sampling's threads,
    // and whatever is left of it runs when the first PNG waits for it.
    std::future<std::string> hash_job;
    if (model.layout == FileLayout::SingleFile)
        hash_job = std::async(std::launch::async, [path = o.model] {
            ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);  // this thread only (Linux)
            return model_hash(path);
        });
    std::string hash;
    const std::string lora_hashes = lora_hashes_parameter(model.loras);
    const std::string sampler = req.sampler.empty() ? default_sampler(model) : req.sampler;
    if (!img2img) {  // sizes not given: the model's native size, as diffusers
        if (!o.width) req.width = default_image_size(model);
        if (!o.height) req.height = default_image_size(model);
    }

    const uint64_t seed = o.seed == "-1" ? std::random_device{}() % 4294967295u : parse_seed(o.seed);

    const bool show = !o.quiet && isatty(STDERR_FILENO);
    const int images = o.batch_count * o.batch_size;
    for (int i = 0; i < o.batch_count; ++i) {
        req.seed = seed + i;
        ProgressBar bar(o.batch_count > 1 ? "batch " + std::to_string(i + 1) : "sampling", show);
        req.progress = [&](int done, int total) { bar.update(done, total); };
        // A notice during the sampling goes on a line of its own, the bar going on below it.
        const auto say = req.notice;
        req.notice = [&bar, say](const std::string& line) {
            bar.finish();
            say(line);
        };
        // Without --vram, generate() itself runs again under --vram auto where the GPU runs out (its
        // fit_on_out_of_memory), with the weights moved off the device in place.
        const GenerationResult result = generate(model, req);
        req.notice = say;
        bar.finish();
        if (!o.latents_out.empty())
            write_safetensors(output_path(o.latents_out, i, o.batch_count), {{"latents", result.final_latent}});

        GenerationParameters params;
        params.prompt = o.prompt;
        params.negative_prompt = o.negative.value_or("");
        const A1111SamplerLabel label = a1111_sampler_label(sampler);
        params.params = {{"Steps", std::to_string(req.steps)}, {"Sampler", label.sampler}};
        if (!label.schedule_type.empty()) params.params.push_back({"Schedule type", label.schedule_type});
        params.params.push_back({"CFG scale", format_cfg(o.cfg_scale)});
        params.params.push_back({"Seed", std::to_string(req.seed)});
        params.params.push_back({"Size", std::to_string(req.width) + "x" + std::to_string(req.height)});
        if (hash_job.valid()) hash = hash_job.get();  // rethrows a failure to read the file
        if (!hash.empty()) params.params.push_back({"Model hash", hash});
        params.params.push_back({"Model", model.name});
        if (img2img) params.params.push_back({"Denoising strength", format_number(req.strength)});
        if (req.clip_skip > 1) params.params.push_back({"Clip skip", std::to_string(req.clip_skip)});
        if (req.rng == "cpu") params.params.push_back({"RNG", "CPU"});
        if (req.timestep_spacing) params.params.push_back({"Timestep spacing", *req.timestep_spacing});
        if (!lora_hashes.empty()) params.params.push_back({"Lora hashes", lora_hashes});
        if (!result.used_embeddings.empty())
            params.params.push_back({"TI hashes", ti_hashes(embeddings, result.used_embeddings)});
        if (!result.emphasis.empty()) params.params.push_back({"Emphasis", result.emphasis});
        for (int b = 0; b < req.batch_size; ++b) {
            GenerationParameters image_params = params;
            if (req.batch_size > 1) {  // AUTOMATIC1111's keys; every image of the batch has the batch's seed
                image_params.params.push_back({"Batch size", std::to_string(req.batch_size)});
                image_params.params.push_back({"Batch pos", std::to_string(b)});
            }
            image_params.params.push_back({"Version", kVersion});
            const std::string path = output_path(o.output, i * req.batch_size + b, images);
            StageScope zone(Stage::ImageWrite);
            write_png(path, image_from_tensor(batch_item(result.image, b)),
                      {{"parameters", format_infotext(image_params)}});
            std::printf("%s\n", path.c_str());
        }
    }
    session.finish();
    return 0;
}

}  // namespace kiln::cli
