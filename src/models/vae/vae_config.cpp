#include "models/vae/vae_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kiln/error.h"

namespace kiln {

void VaeConfig::validate(const std::string& source) const {
    const std::string what = source + ": VAE config ";
    require(!block_out_channels.empty() && block_out_channels.size() <= 8, ErrorKind::InvalidModel,
            what + "block_out_channels must list 1 to 8 levels");
    require(norm_num_groups > 0, ErrorKind::InvalidModel, what + "norm_num_groups must be positive");
    for (int c : block_out_channels)
        require(c > 0 && c % norm_num_groups == 0, ErrorKind::InvalidModel,
                what + "block_out_channels entry " + std::to_string(c) + " is not a positive multiple of " +
                    std::to_string(norm_num_groups) + " norm groups");
    require(layers_per_block > 0, ErrorKind::InvalidModel, what + "layers_per_block must be positive");
    require(in_channels > 0 && out_channels > 0 && latent_channels > 0, ErrorKind::InvalidModel,
            what + "in_channels, out_channels and latent_channels must be positive");
    require(scaling_factor > 0.0f, ErrorKind::InvalidModel, what + "scaling_factor must be positive");
}

namespace {

int int_value(const nlohmann::json& v, const std::string& key, const std::string& source) {
    require(v.is_number_integer() && v.get<int64_t>() >= -1'000'000 && v.get<int64_t>() <= 1'000'000,
            ErrorKind::InvalidModel, source + ": '" + key + "' must be a (reasonable) integer, is " + v.dump());
    return static_cast<int>(v.get<int64_t>());
}

bool present(const nlohmann::json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

}  // namespace

VaeConfig parse_vae_config(const std::string& json_text, const std::string& source) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(json_text);
    } catch (const nlohmann::json::exception& e) {
        fail(ErrorKind::InvalidModel, source + ": not valid JSON: " + e.what());
    }
    require(j.is_object(), ErrorKind::InvalidModel, source + ": a VAE config must be a JSON object");
    if (present(j, "_class_name"))
        require(j["_class_name"] == "AutoencoderKL", ErrorKind::Unsupported,
                source + ": VAE class " + j["_class_name"].dump() + " is not supported (AutoencoderKL)");

    VaeConfig c;
    if (present(j, "block_out_channels")) {
        require(j["block_out_channels"].is_array(), ErrorKind::InvalidModel,
                source + ": 'block_out_channels' must be a list");
        c.block_out_channels.clear();
        for (const auto& v : j["block_out_channels"])
            c.block_out_channels.push_back(int_value(v, "block_out_channels", source));
    }
    auto set_int = [&](const char* key, int& field) {
        if (present(j, key)) field = int_value(j[key], key, source);
    };
    auto set_bool = [&](const char* key, bool& field) {
        if (!present(j, key)) return;
        require(j[key].is_boolean(), ErrorKind::InvalidModel, source + ": '" + key + "' must be true or false");
        field = j[key].get<bool>();
    };
    auto set_float = [&](const char* key, float& field) {
        if (!present(j, key)) return;
        // Range-checked as a double: converting one beyond float's range is undefined behaviour.
        require(j[key].is_number() && std::fabs(j[key].get<double>()) <= std::numeric_limits<float>::max(),
                ErrorKind::InvalidModel, source + ": '" + key + "' must be a number within float range");
        field = j[key].get<float>();
    };
    set_int("layers_per_block", c.layers_per_block);
    set_int("in_channels", c.in_channels);
    set_int("out_channels", c.out_channels);
    set_int("latent_channels", c.latent_channels);
    set_int("norm_num_groups", c.norm_num_groups);
    set_float("scaling_factor", c.scaling_factor);
    set_float("shift_factor", c.shift_factor);
    set_bool("mid_block_add_attention", c.mid_block_add_attention);
    set_bool("use_quant_conv", c.use_quant_conv);
    set_bool("use_post_quant_conv", c.use_post_quant_conv);

    if (present(j, "act_fn"))
        require(j["act_fn"] == "silu", ErrorKind::Unsupported,
                source + ": VAE act_fn " + j["act_fn"].dump() + " is not supported (silu)");
    auto check_blocks = [&](const char* key, const char* type) {
        if (!present(j, key)) return;
        require(j[key].is_array() && j[key].size() == c.block_out_channels.size(), ErrorKind::InvalidModel,
                source + ": '" + key + "' must list one block per block_out_channels entry");
        for (const auto& t : j[key])
            require(t == type, ErrorKind::Unsupported,
                    source + ": VAE block type " + t.dump() + " is not supported (" + type + ")");
    };
    check_blocks("down_block_types", "DownEncoderBlock2D");
    check_blocks("up_block_types", "UpDecoderBlock2D");

    c.validate(source);
    return c;
}

VaeConfig load_vae_config(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    require(in.good(), ErrorKind::IO, "cannot open VAE config " + path);
    std::ostringstream ss;
    ss << in.rdbuf();
    require(!in.bad(), ErrorKind::IO, "cannot read VAE config " + path);
    return parse_vae_config(ss.str(), path);
}

int vae_norm_groups_for_channels(int first_channels) {
    require(first_channels > 0, ErrorKind::InvalidModel,
            "VAE first block has " + std::to_string(first_channels) + " channels");
    return std::min(32, first_channels);
}

}  // namespace kiln
