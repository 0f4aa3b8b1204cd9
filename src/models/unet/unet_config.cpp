#include "models/unet/unet_config.h"

#include <nlohmann/json.hpp>

#include "kiln/error.h"

namespace kiln {

namespace {

std::vector<int> per_level(const nlohmann::json& v, int levels, const char* key) {
    std::vector<int> out;
    if (v.is_array()) {
        for (const auto& x : v) out.push_back(x.get<int>());
        require(static_cast<int>(out.size()) == levels, ErrorKind::InvalidModel,
                std::string("UNet config: '") + key + "' has " + std::to_string(out.size()) + " entries for " +
                    std::to_string(levels) + " levels");
    } else {
        out.assign(levels, v.get<int>());
    }
    return out;
}

}  // namespace

UNetConfig unet_config_from_json(const nlohmann::json& j) {
    UNetConfig c;
    try {
        for (const auto& x : j.at("block_out_channels")) c.block_out_channels.push_back(x.get<int>());
        const int n = c.levels();
        require(n >= 1, ErrorKind::InvalidModel, "UNet config: empty block_out_channels");
        for (const auto& t : j.at("down_block_types")) {
            const std::string type = t.get<std::string>();
            require(type == "CrossAttnDownBlock2D" || type == "DownBlock2D", ErrorKind::Unsupported,
                    "UNet down block type '" + type + "'");
            c.level_has_attention.push_back(type == "CrossAttnDownBlock2D");
        }
        require(static_cast<int>(c.level_has_attention.size()) == n, ErrorKind::InvalidModel,
                "UNet config: down_block_types and block_out_channels differ in length");
        // diffusers reads `attention_head_dim` as the head count when num_attention_heads is unset
        // (a naming quirk kept for SD checkpoints).
        const auto& heads = j.contains("num_attention_heads") && !j["num_attention_heads"].is_null()
                                ? j["num_attention_heads"]
                                : j.at("attention_head_dim");
        c.heads = per_level(heads, n, "attention_head_dim");
        c.transformer_depth = per_level(j.value("transformer_layers_per_block", nlohmann::json(1)), n,
                                        "transformer_layers_per_block");
        c.mid_transformer_depth = c.transformer_depth.back();
        c.layers_per_block = j.value("layers_per_block", 2);
        if (j.contains("sample_size") && j["sample_size"].is_number_integer()) c.sample_size = j["sample_size"];
        c.in_channels = j.value("in_channels", 4);
        c.out_channels = j.value("out_channels", 4);
        c.cross_attention_dim = j.at("cross_attention_dim").get<int>();
        c.norm_groups = j.value("norm_num_groups", 32);
        c.norm_eps = j.value("norm_eps", 1e-5f);
        c.flip_sin_to_cos = j.value("flip_sin_to_cos", true);
        c.freq_shift = j.value("freq_shift", 0.0f);
        const std::string mid = j.value("mid_block_type", std::string("UNetMidBlock2DCrossAttn"));
        require(mid == "UNetMidBlock2DCrossAttn", ErrorKind::Unsupported, "UNet mid block type '" + mid + "'");
        if (j.contains("addition_embed_type") && j["addition_embed_type"].is_string()) {
            const std::string add = j["addition_embed_type"];
            require(add == "text_time", ErrorKind::Unsupported, "UNet addition_embed_type '" + add + "'");
            c.addition_time_embed_dim = j.at("addition_time_embed_dim").get<int>();
            c.projection_class_embeddings_input_dim = j.at("projection_class_embeddings_input_dim").get<int>();
        }
        for (const char* key : {"class_embed_type", "encoder_hid_dim", "time_cond_proj_dim"})
            require(!j.contains(key) || j[key].is_null(), ErrorKind::Unsupported,
                    std::string("UNet config option '") + key + "'");
    } catch (const nlohmann::json::exception& e) {
        fail(ErrorKind::InvalidModel, std::string("UNet config.json: ") + e.what());
    }
    return c;
}

}  // namespace kiln
