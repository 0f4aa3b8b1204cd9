#include "models/clip/clip_single_file.h"

#include <algorithm>
#include <optional>

#include "kiln/error.h"
#include "models/layer_index.h"

namespace kiln {

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// "12.rest" -> (12, "rest"); nothing when the text does not start with a block number and a dot.
std::optional<std::pair<int, std::string>> split_index(const std::string& s) {
    const size_t dot = s.find('.');
    if (dot == std::string::npos) return std::nullopt;
    const std::optional<int> n = layer_index(std::string_view(s).substr(0, dot));
    if (!n) return std::nullopt;
    return std::make_pair(*n, s.substr(dot + 1));
}

const Shape& shape_of(const SafetensorsFile& file, const std::string& name, size_t rank) {
    require(file.has(name), ErrorKind::InvalidModel, file.path() + ": missing tensor '" + name + "'");
    const Shape& s = file.info(name).shape;
    require(s.size() == rank, ErrorKind::InvalidModel,
            file.path() + ": tensor '" + name + "' has shape " + shape_str(s) + ", expected " +
                std::to_string(rank) + " dimensions");
    return s;
}

int as_int(int64_t v) { return static_cast<int>(v); }

[[noreturn]] void unknown_tensor(const SafetensorsFile& file, const std::string& name, const char* what) {
    fail(ErrorKind::InvalidModel, file.path() + ": tensor '" + name + "' is not part of a " + what);
}

// OpenCLIP name -> transformers name, read both ways: by the loader (openclip_layout) and by kiln convert
// (openclip_original), so that the two directions cannot drift apart.
const std::pair<const char*, const char*> kOpenClipTopRenames[] = {
    {"token_embedding.weight", "text_model.embeddings.token_embedding.weight"},
    {"positional_embedding", "text_model.embeddings.position_embedding.weight"},
    {"ln_final.weight", "text_model.final_layer_norm.weight"},
    {"ln_final.bias", "text_model.final_layer_norm.bias"},
};
// Inside transformer.resblocks.N / text_model.encoder.layers.N.
const std::pair<const char*, const char*> kOpenClipLayerRenames[] = {
    {"ln_1.weight", "layer_norm1.weight"},
    {"ln_1.bias", "layer_norm1.bias"},
    {"ln_2.weight", "layer_norm2.weight"},
    {"ln_2.bias", "layer_norm2.bias"},
    {"attn.out_proj.weight", "self_attn.out_proj.weight"},
    {"attn.out_proj.bias", "self_attn.out_proj.bias"},
    {"mlp.c_fc.weight", "mlp.fc1.weight"},
    {"mlp.c_fc.bias", "mlp.fc1.bias"},
    {"mlp.c_proj.weight", "mlp.fc2.weight"},
    {"mlp.c_proj.bias", "mlp.fc2.bias"},
};
// attn.in_proj_{weight,bias} holds the three projections' rows in this order.
const char* const kInProjParts[] = {"q_proj.", "k_proj.", "v_proj."};
const char* const kLayersPrefix = "text_model.encoder.layers.";
const char* const kResblocksPrefix = "transformer.resblocks.";

}  // namespace

bool has_clip_hf_layout(const SafetensorsFile& file, const std::string& prefix) {
    return file.has(prefix + "text_model.embeddings.token_embedding.weight") ||
           file.has(prefix + "embeddings.token_embedding.weight");
}

bool has_openclip_layout(const SafetensorsFile& file, const std::string& prefix) {
    return file.has(prefix + "token_embedding.weight") && file.has(prefix + "positional_embedding");
}

ClipSingleFile clip_hf_layout(const SafetensorsFile& file, const std::string& prefix) {
    static const char* kLayerTensors[] = {
        "layer_norm1.weight",       "layer_norm1.bias",       "layer_norm2.weight",     "layer_norm2.bias",
        "self_attn.q_proj.weight",  "self_attn.q_proj.bias",  "self_attn.k_proj.weight", "self_attn.k_proj.bias",
        "self_attn.v_proj.weight",  "self_attn.v_proj.bias",  "self_attn.out_proj.weight",
        "self_attn.out_proj.bias",  "mlp.fc1.weight",         "mlp.fc1.bias",           "mlp.fc2.weight",
        "mlp.fc2.bias"};
    static const char* kTopTensors[] = {
        "text_model.embeddings.token_embedding.weight", "text_model.embeddings.position_embedding.weight",
        "text_model.final_layer_norm.weight", "text_model.final_layer_norm.bias", "text_projection.weight"};
    const char* what = "CLIP text model (transformers layout)";

    ClipSingleFile out;
    int layers = 0;
    for (const std::string& name : file.names()) {
        if (!starts_with(name, prefix)) continue;
        std::string rest = name.substr(prefix.size());
        // Files saved by old transformers versions have no "text_model." level.
        if (!starts_with(rest, "text_model.") && rest != "text_projection.weight") rest = "text_model." + rest;
        if (rest == "text_model.embeddings.position_ids") continue;  // a buffer, not a weight
        bool known = false;
        for (const char* t : kTopTensors) known = known || rest == t;
        const std::string layer_prefix = "text_model.encoder.layers.";
        if (!known && starts_with(rest, layer_prefix)) {
            auto idx = split_index(rest.substr(layer_prefix.size()));
            if (idx)
                for (const char* t : kLayerTensors)
                    if (idx->second == t) {
                        known = true;
                        layers = std::max(layers, idx->first + 1);
                    }
        }
        if (!known) unknown_tensor(file, name, what);
        out.table[rest] = WeightMapping{name, WeightMapping::Op::Copy};
    }

    auto file_name = [&](const std::string& internal) {
        auto it = out.table.find(internal);
        if (it == out.table.end())
            fail(ErrorKind::InvalidModel, file.path() + ": no tensor " + internal + " under '" + prefix + "'");
        return it->second.file_name;
    };
    const Shape& tok = shape_of(file, file_name("text_model.embeddings.token_embedding.weight"), 2);
    const Shape& pos = shape_of(file, file_name("text_model.embeddings.position_embedding.weight"), 2);
    require(layers > 0, ErrorKind::InvalidModel, file.path() + ": no encoder layers under '" + prefix + "'");
    const Shape& fc1 = shape_of(file, file_name("text_model.encoder.layers.0.mlp.fc1.weight"), 2);

    ClipTextConfig& c = out.config;
    c.vocab = as_int(tok[0]);
    c.hidden = as_int(tok[1]);
    c.max_positions = as_int(pos[0]);
    c.layers = layers;
    c.intermediate = as_int(fc1[0]);
    c.heads = clip_heads_for_hidden(c.hidden);
    c.act = "quick_gelu";
    c.eps = 1e-5f;
    c.projection_dim = 0;
    if (out.table.count("text_projection.weight"))
        c.projection_dim = as_int(shape_of(file, file_name("text_projection.weight"), 2)[0]);
    c.validate(file.path() + " (" + prefix + ")");
    return out;
}

ClipSingleFile openclip_layout(const SafetensorsFile& file, const std::string& prefix) {
    const bool sd2 = prefix == kSd2OpenClipPrefix;
    const char* what = "OpenCLIP text model";
    using Op = WeightMapping::Op;

    // Resblocks present, to know whether SD 2.x's unused last one is there.
    int blocks = 0;
    const std::string block_prefix = prefix + "transformer.resblocks.";
    for (const std::string& name : file.names())
        if (starts_with(name, block_prefix))
            if (auto idx = split_index(name.substr(block_prefix.size()))) blocks = std::max(blocks, idx->first + 1);
    const int layers = sd2 && blocks == 24 ? 23 : blocks;

    ClipSingleFile out;
    for (const std::string& name : file.names()) {
        if (!starts_with(name, prefix)) continue;
        const std::string rest = name.substr(prefix.size());
        auto put = [&](const std::string& internal, Op op = Op::Copy, int part = 0, int parts = 1) {
            out.table[internal] = WeightMapping{name, op, part, parts};
        };
        const char* top = nullptr;
        for (const auto& [from, to] : kOpenClipTopRenames)
            if (rest == from) top = to;
        if (top) {
            put(top);
        } else if (rest == "text_projection") {
            if (!sd2) put("text_projection.weight", Op::Transpose);  // stored as x @ P; a linear keeps P^T
        } else if (rest == "logit_scale" || rest == "attn_mask") {
            // the contrastive loss's temperature and a causal-mask buffer: not weights of the text model
        } else if (starts_with(rest, kResblocksPrefix)) {
            auto idx = split_index(rest.substr(std::string(kResblocksPrefix).size()));
            if (!idx) unknown_tensor(file, name, what);
            const auto& [n, t] = *idx;
            if (n >= layers) continue;  // SD 2.x's resblocks.23
            const std::string p = kLayersPrefix + std::to_string(n) + ".";
            bool done = false;
            for (const auto& [from, to] : kOpenClipLayerRenames)
                if (t == from) {
                    put(p + to);
                    done = true;
                }
            if (t == "attn.in_proj_weight" || t == "attn.in_proj_bias") {
                const std::string suffix = t == "attn.in_proj_weight" ? "weight" : "bias";
                for (int i = 0; i < 3; ++i) put(p + "self_attn." + kInProjParts[i] + suffix, Op::RowSlice, i, 3);
                done = true;
            }
            if (!done) unknown_tensor(file, name, what);
        } else {
            unknown_tensor(file, name, what);
        }
    }

    const Shape& tok = shape_of(file, prefix + "token_embedding.weight", 2);
    const Shape& pos = shape_of(file, prefix + "positional_embedding", 2);
    require(layers > 0, ErrorKind::InvalidModel, file.path() + ": no resblocks under '" + prefix + "'");
    const Shape& fc = shape_of(file, prefix + "transformer.resblocks.0.mlp.c_fc.weight", 2);

    ClipTextConfig& c = out.config;
    c.vocab = as_int(tok[0]);
    c.hidden = as_int(tok[1]);
    c.max_positions = as_int(pos[0]);
    c.layers = layers;
    c.intermediate = as_int(fc[0]);
    c.heads = clip_heads_for_hidden(c.hidden);
    c.act = "gelu";
    c.eps = 1e-5f;
    c.projection_dim = 0;
    if (out.table.count("text_projection.weight"))
        c.projection_dim = as_int(shape_of(file, prefix + "text_projection", 2)[1]);
    c.validate(file.path() + " (" + prefix + ")");
    return out;
}

std::optional<WeightMapping> clip_hf_original(const std::string& internal, const std::string& prefix) {
    if (!starts_with(internal, "text_model.") && internal != "text_projection.weight") return std::nullopt;
    return WeightMapping{prefix + internal};  // the transformers names, under the prefix
}

std::optional<WeightMapping> openclip_original(const std::string& internal, const std::string& prefix) {
    using Op = WeightMapping::Op;
    for (const auto& [from, to] : kOpenClipTopRenames)
        if (internal == to) return WeightMapping{prefix + from};
    if (internal == "text_projection.weight") return WeightMapping{prefix + "text_projection", Op::Transpose};
    if (!starts_with(internal, kLayersPrefix)) return std::nullopt;
    const auto idx = split_index(internal.substr(std::string(kLayersPrefix).size()));
    if (!idx) return std::nullopt;
    const std::string block = prefix + kResblocksPrefix + std::to_string(idx->first) + ".";
    for (const auto& [from, to] : kOpenClipLayerRenames)
        if (idx->second == to) return WeightMapping{block + from};
    for (int i = 0; i < 3; ++i)
        for (const std::string suffix : {"weight", "bias"})
            if (idx->second == "self_attn." + std::string(kInProjParts[i]) + suffix)
                return WeightMapping{block + "attn.in_proj_" + suffix, Op::RowSlice, i, 3};
    return std::nullopt;
}

}  // namespace kiln
