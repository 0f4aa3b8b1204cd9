#include "models/unet/unet_config.h"

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "kiln/error.h"

namespace kiln {

namespace {

// Sizes beyond this are no model's: they would only overflow the int arithmetic of shapes. Real
// sizes are checked against the weights' shapes when the UNet loads, before anything is allocated.
constexpr int64_t kMaxSize = 1'000'000;

struct Reader {
    const nlohmann::json& j;
    const std::string& source;

    [[noreturn]] void bad(const std::string& key, const std::string& what) const {
        fail(ErrorKind::InvalidModel, source + ": UNet config '" + key + "' " + what);
    }
    bool present(const char* key) const { return j.contains(key) && !j[key].is_null(); }
    const nlohmann::json& at(const char* key) const {
        if (!present(key)) bad(key, "is missing");
        return j[key];
    }
    int size(const nlohmann::json& v, const std::string& key, int64_t min = 1) const {
        if (!v.is_number_integer()) bad(key, "must be an integer, is " + v.dump());
        const int64_t x = v.get<int64_t>();
        if (x < min || x > kMaxSize)
            bad(key, "is out of range (" + std::to_string(min) + " to " + std::to_string(kMaxSize) + "): " + v.dump());
        return static_cast<int>(x);
    }
    int size_or(const char* key, int fallback, int64_t min = 1) const {
        return present(key) ? size(j[key], key, min) : fallback;
    }
    float number_or(const char* key, float fallback) const {
        if (!present(key)) return fallback;
        const nlohmann::json& v = j[key];
        // Checked as a double first: converting one beyond float's range is undefined behaviour.
        if (!v.is_number() || !(std::fabs(v.get<double>()) <= std::numeric_limits<float>::max()))
            bad(key, "must be a number within float range, is " + v.dump());
        return v.get<float>();
    }
    bool bool_or(const char* key, bool fallback) const {
        if (!present(key)) return fallback;
        if (!j[key].is_boolean()) bad(key, "must be true or false, is " + j[key].dump());
        return j[key].get<bool>();
    }
    std::string string_or(const char* key, const std::string& fallback) const {
        if (!present(key)) return fallback;
        if (!j[key].is_string()) bad(key, "must be a string, is " + j[key].dump());
        return j[key].get<std::string>();
    }
    // One value per level, or one value for all levels.
    std::vector<int> per_level(const nlohmann::json& v, int levels, const char* key) const {
        std::vector<int> out;
        if (v.is_array()) {
            for (const auto& x : v) out.push_back(size(x, key));
            if (static_cast<int>(out.size()) != levels)
                bad(key, "has " + std::to_string(out.size()) + " entries for " + std::to_string(levels) + " levels");
        } else {
            out.assign(levels, size(v, key));
        }
        return out;
    }
};

}  // namespace

UNetConfig unet_config_from_json(const nlohmann::json& j, const std::string& source) {
    require(j.is_object(), ErrorKind::InvalidModel, source + ": a UNet config must be a JSON object");
    const Reader r{j, source};
    UNetConfig c;
    const auto& channels = r.at("block_out_channels");
    if (!channels.is_array()) r.bad("block_out_channels", "must be a list");
    for (const auto& x : channels) c.block_out_channels.push_back(r.size(x, "block_out_channels"));
    const int n = c.levels();
    if (n < 1 || n > 8) r.bad("block_out_channels", "must list 1 to 8 levels");
    const auto& down = r.at("down_block_types");
    if (!down.is_array()) r.bad("down_block_types", "must be a list");
    for (const auto& t : down) {
        if (!t.is_string()) r.bad("down_block_types", "must list block type names, has " + t.dump());
        const std::string type = t.get<std::string>();
        require(type == "CrossAttnDownBlock2D" || type == "DownBlock2D", ErrorKind::Unsupported,
                source + ": UNet down block type '" + type + "'");
        c.level_has_attention.push_back(type == "CrossAttnDownBlock2D");
    }
    require(static_cast<int>(c.level_has_attention.size()) == n, ErrorKind::InvalidModel,
            source + ": UNet config down_block_types and block_out_channels differ in length");
    // diffusers reads `attention_head_dim` as the head count when num_attention_heads is unset
    // (a naming quirk kept for SD checkpoints).
    const char* heads_key = r.present("num_attention_heads") ? "num_attention_heads" : "attention_head_dim";
    c.heads = r.per_level(r.at(heads_key), n, heads_key);
    c.transformer_depth = r.per_level(r.present("transformer_layers_per_block") ? j["transformer_layers_per_block"]
                                                                                 : nlohmann::json(1),
                                      n, "transformer_layers_per_block");
    c.mid_transformer_depth = c.transformer_depth.back();
    c.layers_per_block = r.size_or("layers_per_block", 2);
    if (j.contains("sample_size") && j["sample_size"].is_number_integer()) c.sample_size = r.size_or("sample_size", 0, 0);
    c.in_channels = r.size_or("in_channels", 4);
    c.out_channels = r.size_or("out_channels", 4);
    c.cross_attention_dim = r.size(r.at("cross_attention_dim"), "cross_attention_dim");
    c.norm_groups = r.size_or("norm_num_groups", 32);
    for (int ch : c.block_out_channels)
        require(ch % c.norm_groups == 0, ErrorKind::InvalidModel,
                source + ": UNet config block_out_channels entry " + std::to_string(ch) +
                    " is not a multiple of norm_num_groups " + std::to_string(c.norm_groups));
    c.norm_eps = r.number_or("norm_eps", 1e-5f);
    require(c.norm_eps > 0.0f, ErrorKind::InvalidModel, source + ": UNet config 'norm_eps' must be positive");
    c.flip_sin_to_cos = r.bool_or("flip_sin_to_cos", true);
    c.freq_shift = r.number_or("freq_shift", 0.0f);
    const std::string mid = r.string_or("mid_block_type", "UNetMidBlock2DCrossAttn");
    require(mid == "UNetMidBlock2DCrossAttn", ErrorKind::Unsupported, source + ": UNet mid block type '" + mid + "'");
    if (j.contains("addition_embed_type") && j["addition_embed_type"].is_string()) {
        const std::string add = j["addition_embed_type"];
        require(add == "text_time", ErrorKind::Unsupported, source + ": UNet addition_embed_type '" + add + "'");
        c.addition_time_embed_dim = r.size(r.at("addition_time_embed_dim"), "addition_time_embed_dim");
        c.projection_class_embeddings_input_dim =
            r.size(r.at("projection_class_embeddings_input_dim"), "projection_class_embeddings_input_dim");
    }
    for (const char* key : {"class_embed_type", "encoder_hid_dim", "time_cond_proj_dim"})
        require(!r.present(key), ErrorKind::Unsupported, source + ": UNet config option '" + key + "'");
    return c;
}

}  // namespace kiln
