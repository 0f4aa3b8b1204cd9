// Loads a checkpoint from either layout users have: a diffusers folder, or a single file in the
// original (LDM) layout whose architecture is read from its tensor names.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/backend.h"
#include "core/memory.h"
#include "kiln/error.h"
#include "models/clip/clip_single_file.h"
#include "models/model.h"
#include "models/reference_schedulers.h"
#include "models/vae/vae_single_file.h"
#include "sampling/scheduler_config.h"

namespace fs = std::filesystem;

namespace kiln {

namespace {

// Tensors that real single-file checkpoints carry and inference does not use.
bool ignorable_single_file_tensor(const std::string& name) {
    static const std::set<std::string> ddpm = {
        "betas", "alphas_cumprod", "alphas_cumprod_prev", "sqrt_alphas_cumprod", "sqrt_one_minus_alphas_cumprod",
        "log_one_minus_alphas_cumprod", "sqrt_recip_alphas_cumprod", "sqrt_recipm1_alphas_cumprod",
        "posterior_variance", "posterior_log_variance_clipped", "posterior_mean_coef1", "posterior_mean_coef2",
        "model_ema.decay", "model_ema.num_updates", "logvar"};
    if (ddpm.count(name)) return true;
    auto ends = [&](const std::string& s) {
        return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    return name.rfind("model_ema.", 0) == 0 || ends("position_ids") || ends("logit_scale");
}

nlohmann::json read_json_file(const fs::path& p) {
    std::ifstream f(p);
    require(f.good(), ErrorKind::IO, "cannot read " + p.string());
    try {
        return nlohmann::json::parse(f);
    } catch (const nlohmann::json::exception& e) {
        fail(ErrorKind::InvalidModel, p.string() + " is not valid JSON: " + e.what());
    }
}

std::shared_ptr<const SafetensorsFile> open_shared(const fs::path& p) {
    return std::make_shared<const SafetensorsFile>(SafetensorsFile::open(p.string()));
}

// A component's weights in a diffusers folder; the fp16 variant is accepted when it is the only one, and
// PyTorch's .bin (read by the safe pickle reader, io/torch_checkpoint.h) when there is no safetensors file.
// Empty when there is none.
fs::path find_component_weights(const fs::path& dir, const std::string& stem) {
    for (const std::string& name : {stem + ".safetensors", stem + ".fp16.safetensors", stem + ".bin", stem + ".fp16.bin"})
        if (fs::exists(dir / name)) return dir / name;
    return {};
}

fs::path component_weights(const fs::path& dir, const std::string& stem) {
    fs::path p = find_component_weights(dir, stem);
    require(!p.empty(), ErrorKind::InvalidModel, "no " + stem + ".safetensors (or .bin) in " + dir.string());
    return p;
}

// A weight source that hands out matrices in the precision the options ask for, on their device.
template <typename Source>
Source with_weights(Source source, const LoadOptions& options, DType device_dtype = DType::F16) {
    source.weights_dtype = options.weights;
    if (!options.device.is_cpu()) {
        source.device = &backend_for(options.device);
        source.device_dtype = device_dtype;
        source.offload_weights = options.offload_weights;
        // Float32 on the GPU only because the VAE is upcast: products on TF32, as PyTorch's convolutions.
        source.device->set_fast_float32(options.precision != DType::F32);
    }
    return source;
}

// A UNet tensor's name in the original (LDM) layout, without prefix: LoRA files name modules either way.
std::function<std::string(const std::string&)> ldm_alias(const UNetConfig& config) {
    return [config](const std::string& name) { return unet_ldm_name(name, config, ""); };
}

void load_unet_file(StableDiffusionModel& m, const LoadOptions& options, std::vector<LoadedLora>& loras);

// What a UNet's tensors cannot tell, from the text encoders already loaded: how heads are counted, and the width of
// SDXL's pooled text (part of its extra conditioning).
HeadRule head_rule(const StableDiffusionModel& m) {
    return m.arch == Architecture::SD1 ? HeadRule::FixedCount : HeadRule::FixedWidth;
}
int pooled_text_dim(const StableDiffusionModel& m) {
    return m.arch == Architecture::SDXL ? m.text_encoders[1].model.config().projection_dim : 0;
}

// A UNet in diffusers' layout, whose names are kiln's internal ones: a diffusers folder's, or one given as --unet. Its
// config from `config_path` (a unet/ folder's config.json), or read from the tensors as a single file's when empty.
void load_diffusers_unet(StableDiffusionModel& m, const std::shared_ptr<const SafetensorsFile>& file,
                         const fs::path& config_path, const LoadOptions& options, std::vector<LoadedLora>& loras) {
    const UNetConfig config = !config_path.empty()
                                  ? unet_config_from_json(read_json_file(config_path), config_path.string())
                                  : unet_config_from_ldm(FileSource(file), head_rule(m), pooled_text_dim(m));
    const FileSource src = with_weights(FileSource(file), options, options.precision);
    m.unet = std::make_unique<UNet>(
        UNet::load(LoraSource(src, match_lora_modules(src, LoraComponent::UNet, loras, ldm_alias(config))), config));
}

void load_diffusers_folder(StableDiffusionModel& m, const fs::path& dir, const LoadOptions& options,
                           std::vector<LoadedLora>& loras) {
    const nlohmann::json index = read_json_file(dir / "model_index.json");
    const fs::path index_path = dir / "model_index.json";
    require(index.is_object(), ErrorKind::InvalidModel, index_path.string() + " must hold a JSON object");
    auto present = [&index](const char* key) { return index.contains(key) && !index[key].is_null(); };
    require(!present("_class_name") || index["_class_name"].is_string(), ErrorKind::InvalidModel,
            index_path.string() + ": '_class_name' must be a string");
    const std::string cls = present("_class_name") ? index["_class_name"].get<std::string>() : "";
    require(cls == "StableDiffusionPipeline" || cls == "StableDiffusionXLPipeline" ||
                cls == "StableDiffusionImg2ImgPipeline" || cls == "StableDiffusionXLImg2ImgPipeline",
            ErrorKind::Unsupported, "diffusers pipeline '" + cls + "' in " + dir.string());
    const bool xl = cls.find("XL") != std::string::npos;
    require(!present("force_zeros_for_empty_prompt") || index["force_zeros_for_empty_prompt"].is_boolean(),
            ErrorKind::InvalidModel, index_path.string() + ": 'force_zeros_for_empty_prompt' must be true or false");
    m.force_zeros_for_empty_prompt =
        present("force_zeros_for_empty_prompt") ? index["force_zeros_for_empty_prompt"].get<bool>() : xl;

    for (const std::string& suffix : xl ? std::vector<std::string>{"", "_2"} : std::vector<std::string>{""}) {
        const fs::path tdir = dir / ("tokenizer" + suffix), edir = dir / ("text_encoder" + suffix);
        ClipTokenizer tok = ClipTokenizer::from_folder(tdir.string());
        auto file = open_shared(component_weights(edir, "model"));
        ClipTextConfig config = load_clip_text_config((edir / "config.json").string());
        const FileSource src = with_weights(FileSource(file), options, options.precision);
        const LoraComponent component = suffix.empty() ? LoraComponent::TextEncoder : LoraComponent::TextEncoder2;
        m.text_encoders.push_back(
            TextEncoder{std::move(tok), ClipTextModel::load(LoraSource(src, match_lora_modules(src, component, loras)), config)});
    }
    const std::string act = m.text_encoders[0].model.config().act;
    m.arch = xl ? Architecture::SDXL : (act == "gelu" ? Architecture::SD2 : Architecture::SD1);

    if (!options.unet_path.empty()) {
        load_unet_file(m, options, loras);
    } else {
        load_diffusers_unet(m, open_shared(component_weights(dir / "unet", "diffusion_pytorch_model")),
                            dir / "unet" / "config.json", options, loras);
    }
    auto vae_file = open_shared(component_weights(dir / "vae", "diffusion_pytorch_model"));
    VaeConfig vae_config = load_vae_config((dir / "vae" / "config.json").string());
    m.vae_scale = vae_config.scaling_factor;
    m.vae = std::make_unique<Vae>(Vae::load(
        with_weights(FileSource(vae_file), options, device_precision(options, m.arch, true)), vae_config, options.vae_encoder));
    {
        const fs::path sched = dir / "scheduler" / "scheduler_config.json";
        std::ifstream f(sched);
        require(f.good(), ErrorKind::IO, "cannot read " + sched.string());
        std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        m.scheduler_config = parse_scheduler_config_text(text, sched.string());  // may hold -Infinity
    }
    if (options.prediction) m.scheduler_config["prediction_type"] = *options.prediction;
}

// The UNet from `file`, its tensors in the original (LDM) layout under `prefix`: "model.diffusion_model." in a whole
// checkpoint, "" in a file that holds the UNet alone (ComfyUI-GGUF's). `unknown` collects tensors under the prefix
// that are no UNet tensor (null: not collected).
void load_ldm_unet(StableDiffusionModel& m, const std::shared_ptr<const SafetensorsFile>& file, const std::string& prefix,
                   const LoadOptions& options, std::vector<LoadedLora>& loras, std::vector<std::string>* unknown) {
    auto unet_table = unet_table_from_ldm(*file, prefix, unknown);
    const UNetConfig unet_config =
        unet_config_from_ldm(MappedSource(file, unet_table, "UNet"), head_rule(m), pooled_text_dim(m));
    // Loading again with the config known, so that a missing tensor is named as the file would name it.
    const MappedSource unet_src = with_weights(
        MappedSource(file, std::move(unet_table), "UNet",
                     [&unet_config, &prefix](const std::string& name) { return unet_ldm_name(name, unet_config, prefix); }),
        options, options.precision);
    m.unet = std::make_unique<UNet>(UNet::load(
        LoraSource(unet_src, match_lora_modules(unet_src, LoraComponent::UNet, loras, ldm_alias(unet_config))),
        unet_config));
}

// --unet PATH: the UNet from another file than the model's text encoders and VAE (loaded first): a whole checkpoint in
// the original layout (its UNet only), a UNet alone with its keys unprefixed (ComfyUI-GGUF's quantized UNet files), or a
// UNet in diffusers' layout: its weights file (config read from the tensors), its unet/ folder (config.json when there
// is one), or a whole diffusers model folder (its unet/ folder, as of a whole checkpoint).
void load_unet_file(StableDiffusionModel& m, const LoadOptions& options, std::vector<LoadedLora>& loras) {
    const std::string& path = options.unet_path;
    require(fs::exists(path), ErrorKind::IO, "no such file or folder: " + path + " (--unet)");
    const bool folder = fs::is_directory(path);
    fs::path weights = path, config;
    if (folder) {
        fs::path dir = path;
        if (fs::exists(dir / "model_index.json")) dir /= "unet";
        weights = find_component_weights(dir, "diffusion_pytorch_model");
        require(!weights.empty(), ErrorKind::InvalidArgument,
                path + " (--unet) is a folder without " + (dir / "diffusion_pytorch_model.safetensors").string() +
                    " (or .bin): --unet takes a file holding a UNet, a diffusers unet/ folder or a diffusers model folder");
        if (fs::exists(dir / "config.json")) config = dir / "config.json";
    }
    const std::string where = weights.string() + " (--unet)";
    auto file = open_shared(weights);
    std::string prefix;  // of the original layout's names
    bool diffusers = false;
    if (file->has("model.diffusion_model.input_blocks.0.0.weight")) {
        prefix = "model.diffusion_model.";
    } else if (holds_unet_alone(*file)) {
        prefix = "";
    } else if (holds_diffusers_unet(*file)) {
        diffusers = true;
    } else {
        fail(ErrorKind::InvalidModel, where + " holds no UNet kiln knows (no input_blocks.0.0.weight, with or without "
                                              "'model.diffusion_model.', nor diffusers' conv_in.weight and "
                                              "time_embedding.linear_1.weight)");
    }
    require(!folder || diffusers, ErrorKind::InvalidModel, where + " holds no UNet in diffusers' layout");
    // SDXL's extra conditioning exactly when the model is SDXL. Checked before the config is read from the tensors,
    // which needs SDXL's pooled text width for an SDXL UNet.
    const bool sdxl_unet = file->has(diffusers ? "add_embedding.linear_1.weight" : prefix + "label_emb.0.0.weight");
    require(sdxl_unet == (m.arch == Architecture::SDXL), ErrorKind::InvalidModel,
            where + ": " + (sdxl_unet ? "an SDXL UNet" : "not an SDXL UNet") + " beside " + m.path + " (" +
                architecture_name(m.arch) + ")");
    if (diffusers) {
        load_diffusers_unet(m, file, config, options, loras);  // UNet::load names tensors it does not expect
    } else {
        std::vector<std::string> unknown;  // a UNet alone holds nothing else
        load_ldm_unet(m, file, prefix, options, loras, prefix.empty() ? &unknown : nullptr);
        if (!unknown.empty()) {
            std::string list;
            for (size_t i = 0; i < unknown.size() && i < 8; ++i) list += (i ? ", " : "") + unknown[i];
            if (unknown.size() > 8) list += ", ... (" + std::to_string(unknown.size()) + " in all)";
            fail(ErrorKind::InvalidModel, "unexpected tensors in " + where + ": " + list);
        }
    }
    // It must take what this model's text encoders give: their widths side by side (SDXL: both).
    int context = 0;
    for (const TextEncoder& e : m.text_encoders) context += e.model.config().hidden;
    const UNetConfig& c = m.unet->config();
    require(c.cross_attention_dim == context, ErrorKind::InvalidModel,
            where + ": its UNet takes " + std::to_string(c.cross_attention_dim) + " values a token, but " + m.path +
                "'s text encoders give " + std::to_string(context) + " (" + architecture_name(m.arch) +
                "): a UNet for another architecture");
}

void load_single_file(StableDiffusionModel& m, const fs::path& path, const LoadOptions& options,
                      std::vector<LoadedLora>& loras) {
    auto file = open_shared(path);
    m.arch = detect_single_file_architecture(*file);
    // Each component's table builder rejects what it cannot place under its own prefix; tensors
    // under no component's prefix are collected here.
    std::vector<std::string> unknown;

    auto add_clip = [&](ClipSingleFile clip, const char* pad_token) {
        const MappedSource src =
            with_weights(MappedSource(file, std::move(clip.table), "text encoder"), options, options.precision);
        ClipTokenizer tok = ClipTokenizer::builtin();
        tok.set_pad_token(pad_token);
        const LoraComponent component =
            m.text_encoders.empty() ? LoraComponent::TextEncoder : LoraComponent::TextEncoder2;
        m.text_encoders.push_back(TextEncoder{
            std::move(tok), ClipTextModel::load(LoraSource(src, match_lora_modules(src, component, loras)), clip.config)});
    };
    // OpenAI CLIP pads with <|endoftext|>, OpenCLIP with "!" (id 0).
    auto add_hf_clip = [&](const char* prefix) { add_clip(clip_hf_layout(*file, prefix), "<|endoftext|>"); };
    auto add_open_clip = [&](const char* prefix) { add_clip(openclip_layout(*file, prefix), "!"); };

    switch (m.arch) {
        case Architecture::SD1:
            add_hf_clip(kSd1ClipPrefix);
            m.scheduler_config = reference_scheduler_config(Architecture::SD1);
            break;
        case Architecture::SD2:
            require(options.prediction.has_value(), ErrorKind::InvalidArgument,
                    "SD 2.x single-file checkpoints do not record whether the model predicts noise or velocity: "
                    "pass --prediction v (768px models such as SD 2.1) or --prediction eps (512px base models)");
            add_open_clip(kSd2OpenClipPrefix);
            m.scheduler_config = reference_scheduler_config(Architecture::SD1);
            break;
        case Architecture::SDXL:
            add_hf_clip(kSdxlClipPrefix);
            add_open_clip(kSdxlOpenClipPrefix);
            m.scheduler_config = reference_scheduler_config(Architecture::SDXL);
            m.force_zeros_for_empty_prompt = true;
            break;
    }
    if (options.prediction) m.scheduler_config["prediction_type"] = *options.prediction;

    if (options.unet_path.empty()) {
        load_ldm_unet(m, file, "model.diffusion_model.", options, loras, &unknown);
    } else {
        unet_table_from_ldm(*file, "model.diffusion_model.", &unknown);  // the file's own UNet tensors are still checked
        load_unet_file(m, options, loras);
    }

    m.vae_scale = m.arch == Architecture::SDXL ? 0.13025f : 0.18215f;
    VaeSingleFile vae = ldm_vae_layout(*file, m.vae_scale);
    const MappedSource vae_src = with_weights(MappedSource(file, std::move(vae.table), "VAE"), options,
                                              device_precision(options, m.arch, true));
    m.vae = std::make_unique<Vae>(Vae::load(vae_src, vae.config, options.vae_encoder));

    const char* component_prefixes[] = {"model.diffusion_model.", "first_stage_model.", "cond_stage_model.",
                                         "conditioner.embedders."};
    for (const std::string& name : file->names()) {
        bool in_component = false;
        for (const char* p : component_prefixes) in_component = in_component || name.rfind(p, 0) == 0;
        if (!in_component && !ignorable_single_file_tensor(name)) unknown.push_back(name);
    }
    if (!unknown.empty()) {
        std::string list;
        for (size_t i = 0; i < unknown.size() && i < 8; ++i) list += (i ? ", " : "") + unknown[i];
        if (unknown.size() > 8) list += ", ... (" + std::to_string(unknown.size()) + " in all)";
        fail(ErrorKind::InvalidModel, "unexpected tensors in " + path.string() + ": " + list);
    }
}

// A1111 skips the keys of a LoRA file that match no layer and prints them; kiln says so in a notice. A file
// of which nothing matched is a LoRA for another architecture, and an error here.
void report_lora_matches(const std::vector<LoadedLora>& loras, const std::function<void(const std::string&)>& notice) {
    for (const LoadedLora& lora : loras) {
        std::vector<std::string> skipped = lora.file.unknown_keys;
        size_t matched = 0;
        for (size_t i = 0; i < lora.matched.size(); ++i)
            if (lora.matched[i]) ++matched;
            else skipped.push_back(lora.file.modules[i].key);
        require(matched > 0, ErrorKind::InvalidArgument,
                "LoRA '" + lora.application.name + "' (" + lora.application.path + "): none of its " +
                    std::to_string(lora.file.modules.size()) + " modules matches a layer of this model (" +
                    lora.file.modules.front().key + ", ...): a LoRA for another architecture?");
        if (skipped.empty() || !notice) continue;
        std::string list;
        for (size_t i = 0; i < skipped.size() && i < 4; ++i) list += (i ? ", " : "") + skipped[i];
        if (skipped.size() > 4) list += ", ...";
        notice("LoRA '" + lora.application.name + "': " + std::to_string(skipped.size()) +
               " modules or tensors match no layer of this model and are skipped, as AUTOMATIC1111 skips them: " + list);
    }
}

}  // namespace

std::string unet_recording_key_prefix(const StableDiffusionModel& model) {
    return "unet of model " + std::to_string(model.serial) + " ";
}

uint64_t next_model_serial() {
    static std::atomic<uint64_t> next{1};
    return next++;
}

DType device_precision(const LoadOptions& options, Architecture arch, bool is_vae) {
    // SDXL's VAE overflows fp16. bfloat16 has float32's range in half the bytes, and runs on the tensor cores
    // at twice TF32's rate: 76 -> 62 ms for a 1024x1024 decode on the H200 (docs/CUDA.md). Where the device
    // has no bfloat16 (Vulkan, older GPUs), float32 as diffusers' force_upcast.
    if (is_vae && arch == Architecture::SDXL && options.precision == DType::F16)
        return !options.device.is_cpu() && backend_for(options.device).supports(DType::BF16) ? DType::BF16
                                                                                           : DType::F32;
    return options.precision;
}

const char* architecture_name(Architecture a) {
    switch (a) {
        case Architecture::SD1: return "SD 1.x";
        case Architecture::SD2: return "SD 2.x";
        case Architecture::SDXL: return "SDXL";
    }
    return "?";
}

const char* layout_name(FileLayout l) {
    return l == FileLayout::DiffusersFolder ? "diffusers folder" : "single file (original layout)";
}

bool holds_unet_alone(const SafetensorsFile& file) {
    return file.has("input_blocks.0.0.weight") && file.has("out.2.weight");
}

std::string diffusers_component_weights(const std::string& dir, const std::string& stem) {
    return find_component_weights(dir, stem).string();
}

bool holds_diffusers_unet(const SafetensorsFile& file) {
    return file.has("conv_in.weight") && file.has("time_embedding.linear_1.weight");
}

Architecture detect_single_file_architecture(const SafetensorsFile& file) {
    if (file.has("conditioner.embedders.1.model.ln_final.weight")) {
        require(file.has("conditioner.embedders.0.transformer.text_model.final_layer_norm.weight"),
                ErrorKind::Unsupported, file.path() + " looks like an SDXL refiner, which kiln does not run yet");
        return Architecture::SDXL;
    }
    if (file.has("cond_stage_model.model.ln_final.weight")) return Architecture::SD2;
    // Early SD 1.x checkpoints (.ckpt saved with transformers before 4.21) lack the "text_model." level.
    if (file.has("cond_stage_model.transformer.text_model.final_layer_norm.weight") ||
        file.has("cond_stage_model.transformer.final_layer_norm.weight"))
        return Architecture::SD1;
    if (file.has("model.diffusion_model.input_blocks.0.0.weight"))
        fail(ErrorKind::InvalidModel, file.path() + " has a UNet but no text encoder kiln knows");
    if (holds_unet_alone(file))
        fail(ErrorKind::Unsupported, file.path() + " holds a UNet alone (ComfyUI-GGUF's layout: UNet keys without "
                                                   "'model.diffusion_model.'): pass it as --unet beside a checkpoint "
                                                   "that has the text encoders and VAE (-m)");
    if (holds_diffusers_unet(file))
        fail(ErrorKind::Unsupported, file.path() + " holds a UNet alone in diffusers' layout (a diffusers folder's "
                                                   "unet/ weights): pass it as --unet beside a checkpoint that has the "
                                                   "text encoders and VAE (-m)");
    fail(ErrorKind::InvalidModel, file.path() + " is not a Stable Diffusion checkpoint (no UNet or text encoder tensors)");
}

StableDiffusionModel load_model(const std::string& path, const LoadOptions& options) {
    StableDiffusionModel m;
    m.path = path;
    const fs::path p(path);
    require(fs::exists(p), ErrorKind::IO, "no such file or folder: " + path);
    if (options.prediction)
        require(*options.prediction == "epsilon" || *options.prediction == "v_prediction", ErrorKind::InvalidArgument,
                "prediction type must be epsilon or v_prediction");
    m.device = options.device;
    m.precision = options.device.is_cpu() ? DType::F32 : options.precision;
    // Read (and checked) before any weight is: a bad LoRA file fails fast.
    std::vector<LoadedLora> loras;
    for (const LoraApplication& a : options.loras) {
        LoraFile file = read_lora_file(a.path);
        const size_t n = file.modules.size();
        loras.push_back({a, std::move(file), std::vector<bool>(n, false)});
    }
    // The component loads below make only weights (memory accounting by category).
    MemoryCategoryScope weights(MemoryCategory::Weights);
    if (fs::is_directory(p)) {
        require(fs::exists(p / "model_index.json"), ErrorKind::InvalidModel,
                path + " is a folder but not a diffusers model (no model_index.json)");
        m.layout = FileLayout::DiffusersFolder;
        m.name = fs::absolute(p).lexically_normal().filename().string();
        if (m.name.empty()) m.name = fs::absolute(p).parent_path().filename().string();
        load_diffusers_folder(m, p, options, loras);
    } else {
        m.layout = FileLayout::SingleFile;
        m.name = p.stem().string();
        load_single_file(m, p, options, loras);
    }
    report_lora_matches(loras, options.notice);
    m.loras = options.loras;
    if (m.unet) m.unet->set_recording_prefix(unet_recording_key_prefix(m));
    return m;
}

}  // namespace kiln
