#include "models/synthetic_weights.h"

#include "core/backend.h"

#include <cmath>

#include "core/memory.h"
#include "kiln/error.h"
#include "models/reference_schedulers.h"

namespace kiln {

namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser: a cheap hash with good avalanche
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t hash_name(const std::string& s, uint64_t seed) {
    uint64_t h = 0xcbf29ce484222325ull ^ mix(seed);  // FNV-1a
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
    return h;
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// center + uniform values of standard deviation `std` (half-width std * sqrt(3)).
Tensor make_values(const Shape& shape, uint64_t key, float center, float std) {
    Tensor t(shape);
    float* v = t.data();
    const int64_t n = t.numel();
    const float half_width = std * 1.7320508f;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) {
        const float u = static_cast<float>(mix(key + static_cast<uint64_t>(i)) >> 40) * (1.0f / 16777216.0f);
        v[i] = center + half_width * (2.0f * u - 1.0f);
    }
    return t;
}

ClipTextConfig clip(int hidden, int layers, int heads, int intermediate, const char* act, int projection) {
    ClipTextConfig c;
    c.hidden = hidden;
    c.layers = layers;
    c.heads = heads;
    c.intermediate = intermediate;
    c.act = act;
    c.projection_dim = projection;
    return c;
}

VaeConfig sd_vae(float scaling) {
    VaeConfig v;
    v.block_out_channels = {128, 256, 512, 512};
    v.layers_per_block = 2;
    v.norm_num_groups = 32;
    v.scaling_factor = scaling;
    return v;
}

UNetConfig sd_unet(std::vector<int> heads, int context) {
    UNetConfig u;
    u.block_out_channels = {320, 640, 1280, 1280};
    u.level_has_attention = {true, true, true, false};
    u.heads = std::move(heads);
    u.transformer_depth = {1, 1, 1, 1};
    u.mid_transformer_depth = 1;
    u.cross_attention_dim = context;
    return u;
}

}  // namespace

SyntheticArch parse_synthetic_arch(const std::string& name) {
    if (name == "sd15") return SyntheticArch::SD15;
    if (name == "sd21") return SyntheticArch::SD21;
    if (name == "sdxl") return SyntheticArch::SDXL;
    if (name == "tiny") return SyntheticArch::Tiny;
    fail(ErrorKind::InvalidArgument, "unknown architecture '" + name + "' (sd15, sd21 or sdxl)");
}

const char* synthetic_arch_name(SyntheticArch arch) {
    switch (arch) {
        case SyntheticArch::SD15: return "sd15";
        case SyntheticArch::SD21: return "sd21";
        case SyntheticArch::SDXL: return "sdxl";
        case SyntheticArch::Tiny: return "tiny";
    }
    return "?";
}

ArchitectureConfigs architecture_configs(SyntheticArch arch) {
    ArchitectureConfigs a;
    switch (arch) {
        case SyntheticArch::SD15:  // CLIP ViT-L/14; attention_head_dim 8 is diffusers' head count
            a.arch = Architecture::SD1;
            a.text_encoders = {clip(768, 12, 12, 3072, "quick_gelu", 0)};
            a.pad_tokens = {"<|endoftext|>"};
            a.unet = sd_unet({8, 8, 8, 8}, 768);
            a.vae = sd_vae(0.18215f);
            a.scheduler_config = reference_scheduler_config(Architecture::SD1);
            break;
        case SyntheticArch::SD21:  // OpenCLIP ViT-H/14 without its last layer; 64-wide heads; v-prediction
            a.arch = Architecture::SD2;
            a.text_encoders = {clip(1024, 23, 16, 4096, "gelu", 0)};
            a.pad_tokens = {"!"};
            a.unet = sd_unet({5, 10, 20, 20}, 1024);
            a.unet_conv_projections = false;
            a.vae = sd_vae(0.18215f);
            a.scheduler_config = reference_scheduler_config(Architecture::SD1);
            a.scheduler_config["prediction_type"] = "v_prediction";
            break;
        case SyntheticArch::SDXL: {  // CLIP ViT-L + OpenCLIP ViT-bigG with projection; context 768 + 1280
            a.arch = Architecture::SDXL;
            a.text_encoders = {clip(768, 12, 12, 3072, "quick_gelu", 0), clip(1280, 32, 20, 5120, "gelu", 1280)};
            a.pad_tokens = {"<|endoftext|>", "!"};
            UNetConfig& u = a.unet;
            u.block_out_channels = {320, 640, 1280};
            u.level_has_attention = {false, true, true};
            u.heads = {5, 10, 20};
            u.transformer_depth = {1, 2, 10};
            u.mid_transformer_depth = 10;
            u.cross_attention_dim = 2048;
            u.addition_time_embed_dim = 256;
            u.projection_class_embeddings_input_dim = 2816;  // 1280 pooled + 6 * 256 time ids
            a.unet_conv_projections = false;
            a.vae = sd_vae(0.13025f);
            a.scheduler_config = reference_scheduler_config(Architecture::SDXL);
            a.force_zeros_for_empty_prompt = true;
            break;
        }
        case SyntheticArch::Tiny: {  // tests/data/sd15-mini/diffusers/*/config.json
            a.arch = Architecture::SD1;
            a.text_encoders = {clip(32, 3, 4, 64, "quick_gelu", 0)};
            a.pad_tokens = {"<|endoftext|>"};
            UNetConfig& u = a.unet;
            u.block_out_channels = {16, 32, 32, 32};
            u.level_has_attention = {true, true, true, false};
            u.heads = {4, 4, 4, 4};
            u.transformer_depth = {1, 1, 1, 1};
            u.cross_attention_dim = 32;
            u.norm_groups = 8;
            a.vae.block_out_channels = {8, 16, 32, 32};
            a.vae.layers_per_block = 2;
            a.vae.norm_num_groups = 8;
            a.scheduler_config = reference_scheduler_config(Architecture::SD1);
            break;
        }
    }
    return a;
}

SyntheticSource::SyntheticSource(std::string component, uint64_t seed, bool conv_projections)
    : component_(std::move(component)), seed_(seed), conv_projections_(conv_projections) {}

Tensor SyntheticSource::load(const std::string& name) const {
    // SpatialTransformer reads its norm before proj_in and proj_out, whose square width it has.
    for (const char* proj : {".proj_in.weight", ".proj_out.weight"}) {
        if (!ends_with(name, proj)) continue;
        auto it = made_.find(name.substr(0, name.size() - std::string(proj).size()) + ".norm.weight");
        if (it == made_.end() || it->second.size() != 1) break;
        const int64_t c = it->second[0];
        return load_expecting(name, conv_projections_ ? Shape{c, c, 1, 1} : Shape{c, c});
    }
    fail(ErrorKind::InvalidModel, "synthetic " + component_ + " weights cannot tell the shape of '" + name + "'");
}

Tensor SyntheticSource::load_expecting(const std::string& name, const Shape& expected) const {
    made_[name] = expected;
    const uint64_t key = hash_name(component_ + "/" + name, seed_);
    const int64_t numel = shape_numel(expected);
    if (ends_with(name, ".bias")) return make_values(expected, key, 0.0f, 0.01f);
    if (expected.size() == 1) return make_values(expected, key, 1.0f, 0.1f / 1.7320508f);  // norm scales
    if ((ends_with(name, "token_embedding.weight") || ends_with(name, "position_embedding.weight")) &&
        expected.size() == 2)
        return make_values(expected, key, 0.0f, 0.02f);
    const int64_t fan_in = expected.empty() || expected[0] == 0 ? 1 : std::max<int64_t>(1, numel / expected[0]);
    return make_values(expected, key, 0.0f, 0.5f / std::sqrt(static_cast<float>(fan_in)));
}

std::vector<std::string> SyntheticSource::names() const {
    std::vector<std::string> out;
    for (const auto& [name, shape] : made_) out.push_back(name);
    return out;
}

StableDiffusionModel make_synthetic_model(SyntheticArch arch, const SyntheticParts& parts, uint64_t seed) {
    const ArchitectureConfigs a = architecture_configs(arch);
    StableDiffusionModel m;
    m.arch = a.arch;
    m.layout = FileLayout::SingleFile;
    m.path = std::string("synthetic:") + synthetic_arch_name(arch);
    m.name = std::string("synthetic-") + synthetic_arch_name(arch);
    m.vae_scale = a.vae.scaling_factor;
    m.scheduler_config = a.scheduler_config;
    m.force_zeros_for_empty_prompt = a.force_zeros_for_empty_prompt;

    m.device = parts.device;
    m.precision = parts.device.is_cpu() ? DType::F32 : parts.precision;
    LoadOptions placement;
    placement.device = parts.device;
    placement.precision = parts.precision;
    auto place = [&](SyntheticSource& src, bool is_vae) {
        src.weights_dtype = parts.weights;
        if (parts.device.is_cpu()) return;
        src.device = &backend_for(parts.device);
        src.device_dtype = device_precision(placement, a.arch, is_vae);
        src.offload_weights = parts.offload_weights;
        src.device->set_fast_float32(parts.precision != DType::F32);  // as the loader (model_loader.cpp)
    };
    MemoryCategoryScope weights(MemoryCategory::Weights);
    if (parts.text)
        for (size_t i = 0; i < a.text_encoders.size(); ++i) {
            ClipTokenizer tok = ClipTokenizer::builtin();
            tok.set_pad_token(a.pad_tokens[i]);
            SyntheticSource src("text_encoder" + std::string(i ? "_2" : ""), seed, false);
            place(src, false);
            m.text_encoders.push_back(TextEncoder{std::move(tok), ClipTextModel::load(src, a.text_encoders[i])});
        }
    if (parts.unet) {
        SyntheticSource src("unet", seed, a.unet_conv_projections);
        place(src, false);
        m.unet = std::make_unique<UNet>(UNet::load(src, a.unet));
        m.unet->set_recording_prefix(unet_recording_key_prefix(m));
    }
    if (parts.vae) {
        SyntheticSource src("vae", seed, false);
        place(src, true);
        m.vae = std::make_unique<Vae>(Vae::load(src, a.vae, parts.vae_encoder));
    }
    return m;
}

}  // namespace kiln
