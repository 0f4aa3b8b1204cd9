#include "models/vae/vae_single_file.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "kiln/error.h"
#include "models/layer_index.h"

namespace kiln {

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

std::vector<std::string> split_dots(const std::string& s) {
    std::vector<std::string> parts;
    size_t start = 0;
    for (size_t i = 0; i <= s.size(); ++i)
        if (i == s.size() || s[i] == '.') {
            parts.push_back(s.substr(start, i - start));
            start = i + 1;
        }
    return parts;
}

std::optional<int> as_index(const std::string& s) { return layer_index(s); }

std::string join_from(const std::vector<std::string>& parts, size_t from) {
    std::string out;
    for (size_t i = from; i < parts.size(); ++i) out += (i > from ? "." : "") + parts[i];
    return out;
}

bool is_param(const std::string& s) { return s == "weight" || s == "bias"; }

// The diffusers name of a ResnetBlock2D parameter ("norm1.weight", ...), or nothing.
std::optional<std::string> resnet_param(const std::vector<std::string>& parts, size_t from) {
    if (parts.size() != from + 2 || !is_param(parts[from + 1])) return std::nullopt;
    const std::string& layer = parts[from];
    if (layer == "nin_shortcut") return "conv_shortcut." + parts[from + 1];
    if (layer == "norm1" || layer == "conv1" || layer == "norm2" || layer == "conv2") return join_from(parts, from);
    return std::nullopt;
}

const Shape& shape_of(const SafetensorsFile& file, const std::string& name, size_t rank) {
    require(file.has(name), ErrorKind::InvalidModel, file.path() + ": missing tensor '" + name + "'");
    const Shape& s = file.info(name).shape;
    require(s.size() == rank, ErrorKind::InvalidModel,
            file.path() + ": tensor '" + name + "' has shape " + shape_str(s) + ", expected " +
                std::to_string(rank) + " dimensions");
    return s;
}

}  // namespace

bool has_ldm_vae(const SafetensorsFile& file, const std::string& prefix) {
    return file.has(prefix + "encoder.conv_in.weight") || file.has(prefix + "decoder.conv_in.weight");
}

VaeSingleFile ldm_vae_layout(const SafetensorsFile& file, float scaling_factor, const std::string& prefix) {
    using Op = WeightMapping::Op;
    // Levels are numbered from the highest resolution in both halves of the original layout.
    int enc_levels = 0, dec_levels = 0, blocks_per_level = 0;
    for (const std::string& name : file.names()) {
        if (!starts_with(name, prefix)) continue;
        const auto parts = split_dots(name.substr(prefix.size()));
        if (parts.size() < 3) continue;
        const auto n = as_index(parts[2]);
        if (!n) continue;
        if (parts[0] == "encoder" && parts[1] == "down") {
            enc_levels = std::max(enc_levels, *n + 1);
            if (*n == 0 && parts.size() > 4 && parts[3] == "block")
                if (auto m = as_index(parts[4])) blocks_per_level = std::max(blocks_per_level, *m + 1);
        }
        if (parts[0] == "decoder" && parts[1] == "up") dec_levels = std::max(dec_levels, *n + 1);
    }

    VaeSingleFile out;
    for (const std::string& name : file.names()) {
        if (!starts_with(name, prefix)) continue;
        const std::string rest = name.substr(prefix.size());
        const auto parts = split_dots(rest);
        auto put = [&](const std::string& internal, Op op = Op::Copy) { out.table[internal] = WeightMapping{name, op}; };
        auto unknown = [&]() {
            fail(ErrorKind::InvalidModel, file.path() + ": tensor '" + name + "' is not part of an LDM VAE");
        };
        const std::string half = parts[0];  // "encoder" / "decoder" / "quant_conv" / "post_quant_conv"

        if ((half == "quant_conv" || half == "post_quant_conv") && parts.size() == 2 && is_param(parts[1])) {
            put(rest);
            continue;
        }
        if ((half != "encoder" && half != "decoder") || parts.size() < 3) unknown();
        const std::string& what = parts[1];
        if ((what == "conv_in" || what == "conv_out") && parts.size() == 3 && is_param(parts[2])) {
            put(rest);
        } else if (what == "norm_out" && parts.size() == 3 && is_param(parts[2])) {
            put(half + ".conv_norm_out." + parts[2]);
        } else if (what == "mid" && (parts[2] == "block_1" || parts[2] == "block_2")) {
            auto p = resnet_param(parts, 3);
            if (!p) unknown();
            put(half + ".mid_block.resnets." + (parts[2] == "block_1" ? "0." : "1.") + *p);
        } else if (what == "mid" && parts[2] == "attn_1" && parts.size() == 5 && is_param(parts[4])) {
            const std::string& layer = parts[3];
            const std::string base = half + ".mid_block.attentions.0.";
            if (layer == "norm") {
                put(base + "group_norm." + parts[4]);
            } else if (layer == "q" || layer == "k" || layer == "v" || layer == "proj_out") {
                const std::string to = layer == "proj_out" ? "to_out.0." : "to_" + layer + ".";
                // Stored as 1x1 convs [C,C,1,1]; diffusers' linears are [C,C].
                const bool conv = parts[4] == "weight" && file.info(name).shape.size() > 2;
                put(base + to + parts[4], conv ? Op::Squeeze : Op::Copy);
            } else {
                unknown();
            }
        } else if (half == "encoder" && what == "down" && as_index(parts[2])) {
            const std::string base = "encoder.down_blocks." + parts[2] + ".";
            if (parts.size() > 4 && parts[3] == "block" && as_index(parts[4])) {
                auto p = resnet_param(parts, 5);
                if (!p) unknown();
                put(base + "resnets." + parts[4] + "." + *p);
            } else if (parts.size() == 6 && parts[3] == "downsample" && parts[4] == "conv" && is_param(parts[5])) {
                put(base + "downsamplers.0.conv." + parts[5]);
            } else {
                unknown();
            }
        } else if (half == "decoder" && what == "up" && as_index(parts[2])) {
            const std::string base = "decoder.up_blocks." + std::to_string(dec_levels - 1 - *as_index(parts[2])) + ".";
            if (parts.size() > 4 && parts[3] == "block" && as_index(parts[4])) {
                auto p = resnet_param(parts, 5);
                if (!p) unknown();
                put(base + "resnets." + parts[4] + "." + *p);
            } else if (parts.size() == 6 && parts[3] == "upsample" && parts[4] == "conv" && is_param(parts[5])) {
                put(base + "upsamplers.0.conv." + parts[5]);
            } else {
                unknown();
            }
        } else {
            unknown();
        }
    }

    require(enc_levels > 0 && blocks_per_level > 0, ErrorKind::InvalidModel,
            file.path() + ": no VAE encoder blocks under '" + prefix + "'");
    require(dec_levels == enc_levels, ErrorKind::InvalidModel,
            file.path() + ": the VAE encoder has " + std::to_string(enc_levels) + " levels but the decoder " +
                std::to_string(dec_levels));
    VaeConfig& c = out.config;
    c.block_out_channels.clear();
    for (int i = 0; i < enc_levels; ++i)
        c.block_out_channels.push_back(static_cast<int>(
            shape_of(file, prefix + "encoder.down." + std::to_string(i) + ".block.0.conv1.weight", 4)[0]));
    c.layers_per_block = blocks_per_level;
    c.in_channels = static_cast<int>(shape_of(file, prefix + "encoder.conv_in.weight", 4)[1]);
    c.out_channels = static_cast<int>(shape_of(file, prefix + "decoder.conv_out.weight", 4)[0]);
    c.latent_channels = static_cast<int>(shape_of(file, prefix + "decoder.conv_in.weight", 4)[1]);
    c.norm_num_groups = vae_norm_groups_for_channels(c.block_out_channels[0]);
    c.scaling_factor = scaling_factor;
    c.shift_factor = 0.0f;
    c.mid_block_add_attention = out.table.count("encoder.mid_block.attentions.0.to_q.weight") > 0;
    c.use_quant_conv = out.table.count("quant_conv.weight") > 0;
    c.use_post_quant_conv = out.table.count("post_quant_conv.weight") > 0;
    c.validate(file.path() + " (" + prefix + ")");
    return out;
}

}  // namespace kiln
