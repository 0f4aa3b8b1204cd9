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

// parts[from, to) joined by dots.
std::string join_from(const std::vector<std::string>& parts, size_t from, size_t to) {
    std::string out;
    for (size_t i = from; i < to; ++i) out += (i > from ? "." : "") + parts[i];
    return out;
}

bool is_param(const std::string& s) { return s == "weight" || s == "bias"; }

// Original layer name -> diffusers layer name, read both ways: by the loader (ldm_vae_layout) and by kiln convert
// (ldm_vae_original). A ResnetBlock2D's layers:
const std::pair<const char*, const char*> kResnetLayers[] = {
    {"norm1", "norm1"}, {"conv1", "conv1"}, {"norm2", "norm2"}, {"conv2", "conv2"}, {"nin_shortcut", "conv_shortcut"}};
// The mid block's attention (mid.attn_1 / mid_block.attentions.0):
const std::pair<const char*, const char*> kAttentionLayers[] = {
    {"norm", "group_norm"}, {"q", "to_q"}, {"k", "to_k"}, {"v", "to_v"}, {"proj_out", "to_out.0"}};

// The name `layer` takes in the other layout (`to_diffusers`: original -> diffusers), or nothing.
template <size_t N>
std::optional<std::string> rename_layer(const std::pair<const char*, const char*> (&table)[N], const std::string& layer,
                                        bool to_diffusers) {
    for (const auto& [original, diffusers] : table)
        if (layer == (to_diffusers ? original : diffusers)) return to_diffusers ? diffusers : original;
    return std::nullopt;
}

// The diffusers name of a ResnetBlock2D parameter ("norm1.weight", ...), or nothing.
std::optional<std::string> resnet_param(const std::vector<std::string>& parts, size_t from) {
    if (parts.size() != from + 2 || !is_param(parts[from + 1])) return std::nullopt;
    const auto layer = rename_layer(kResnetLayers, parts[from], true);
    return layer ? std::optional<std::string>(*layer + "." + parts[from + 1]) : std::nullopt;
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
            const auto layer = rename_layer(kAttentionLayers, parts[3], true);
            if (!layer) unknown();
            // q, k, v, proj_out are stored as 1x1 convs [C,C,1,1]; diffusers' linears are [C,C].
            const bool conv = parts[3] != "norm" && parts[4] == "weight" && file.info(name).shape.size() > 2;
            put(half + ".mid_block.attentions.0." + *layer + "." + parts[4], conv ? Op::Squeeze : Op::Copy);
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

std::optional<WeightMapping> ldm_vae_original(const std::string& internal, size_t rank, int levels,
                                              const std::string& prefix) {
    using Op = WeightMapping::Op;
    const auto parts = split_dots(internal);
    const auto param = [&](size_t i) { return parts.size() == i + 1 && is_param(parts[i]); };
    auto mapped = [&](const std::string& original, Op op = Op::Copy) {
        return std::optional<WeightMapping>(WeightMapping{prefix + original, op});
    };
    // "<resnet layer>.<param>" from parts[from] on, in the original's names.
    auto resnet = [&](size_t from) -> std::optional<std::string> {
        const auto layer = param(from + 1) ? rename_layer(kResnetLayers, parts[from], false) : std::nullopt;
        return layer ? std::optional<std::string>(*layer + "." + parts[from + 1]) : std::nullopt;
    };
    const std::string half = parts[0];
    if ((half == "quant_conv" || half == "post_quant_conv") && param(1)) return mapped(internal);
    if ((half != "encoder" && half != "decoder") || parts.size() < 3) return std::nullopt;
    const std::string& what = parts[1];
    if ((what == "conv_in" || what == "conv_out") && param(2)) return mapped(internal);
    if (what == "conv_norm_out" && param(2)) return mapped(half + ".norm_out." + parts[2]);
    if (what == "mid_block" && parts.size() > 4 && parts[2] == "resnets" && (parts[3] == "0" || parts[3] == "1")) {
        const auto r = resnet(4);
        return r ? mapped(half + ".mid.block_" + (parts[3] == "0" ? "1." : "2.") + *r) : std::nullopt;
    }
    if (what == "mid_block" && parts.size() > 5 && parts[2] == "attentions" && parts[3] == "0") {
        const size_t last = parts.size() - 1;  // to_out.0 has two parts
        const auto layer =
            param(last) ? rename_layer(kAttentionLayers, join_from(parts, 4, last), false) : std::nullopt;
        if (!layer) return std::nullopt;
        const bool linear = *layer != "norm" && parts[last] == "weight" && rank == 2;  // stored as a 1x1 conv
        return mapped(half + ".mid.attn_1." + *layer + "." + parts[last], linear ? Op::Squeeze : Op::Copy);
    }
    // down_blocks.N / up_blocks.N: the original numbers both halves' levels from the highest resolution.
    const auto n = parts.size() > 4 ? as_index(parts[2]) : std::nullopt;
    if (!n || *n >= levels) return std::nullopt;
    const bool down = half == "encoder" && what == "down_blocks", up = half == "decoder" && what == "up_blocks";
    if (!down && !up) return std::nullopt;
    const std::string base = half + (down ? ".down." + parts[2] : ".up." + std::to_string(levels - 1 - *n)) + ".";
    if (parts[3] == "resnets" && as_index(parts[4])) {
        const auto r = resnet(5);
        return r ? mapped(base + "block." + parts[4] + "." + *r) : std::nullopt;
    }
    const std::string sampler = down ? "downsamplers" : "upsamplers";
    if (parts[3] == sampler && parts[4] == "0" && parts.size() == 7 && parts[5] == "conv" && param(6))
        return mapped(base + (down ? "downsample" : "upsample") + ".conv." + parts[6]);
    return std::nullopt;
}

}  // namespace kiln
