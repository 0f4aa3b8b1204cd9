// Original (LDM) UNet names -> diffusers names. The original layout numbers blocks flatly
// (input_blocks.K.S, output_blocks.K.S); diffusers groups them by level. The rules follow from how
// both describe the same network; they need only the number of layers per level, which the names
// themselves tell.
#include <algorithm>
#include <regex>

#include "kiln/error.h"
#include "models/layer_index.h"
#include "models/unet/unet_config.h"

namespace kiln {

namespace {

// Resnet inner names differ; transformer inner names are the same in both layouts.
const std::pair<const char*, const char*> kResnetRenames[] = {
    {"in_layers.0.", "norm1."},         {"in_layers.2.", "conv1."},  {"emb_layers.1.", "time_emb_proj."},
    {"out_layers.0.", "norm2."},        {"out_layers.3.", "conv2."}, {"skip_connection.", "conv_shortcut."},
};

bool rename_resnet(const std::string& rest, std::string* out) {
    for (const auto& [from, to] : kResnetRenames) {
        if (rest.rfind(from, 0) == 0) {
            *out = to + rest.substr(std::string(from).size());
            return true;
        }
    }
    return false;
}

// Parses "<int>.<int>.<rest>".
bool split_indices(const std::string& s, int* a, int* b, std::string* rest) {
    const size_t dot1 = s.find('.'), dot2 = dot1 == std::string::npos ? dot1 : s.find('.', dot1 + 1);
    if (dot2 == std::string::npos) return false;
    const std::optional<int> first = layer_index(std::string_view(s).substr(0, dot1));
    const std::optional<int> second = layer_index(std::string_view(s).substr(dot1 + 1, dot2 - dot1 - 1));
    if (!first || !second) return false;
    *a = *first;
    *b = *second;
    *rest = s.substr(dot2 + 1);
    return true;
}

int count_input_blocks(const std::vector<std::string>& names, const std::string& prefix) {
    int n = 0;
    const std::string p = prefix + "input_blocks.";
    for (const auto& name : names)
        if (name.rfind(p, 0) == 0) {  // a name whose index is not a number is reported as unknown later
            const std::string rest = name.substr(p.size());
            if (const std::optional<int> k = layer_index(rest.substr(0, rest.find('.')))) n = std::max(n, *k + 1);
        }
    return n;
}

}  // namespace

std::map<std::string, WeightMapping> unet_table_from_ldm(const SafetensorsFile& file, const std::string& prefix,
                                                         std::vector<std::string>* unknown) {
    const std::vector<std::string> names = file.names();
    // Levels = downsamplers + 1; each level has layers_per_block blocks plus its downsampler, so
    // input_blocks (after conv_in at index 0) number levels * (L + 1) - 1.
    int downsamplers = 0;
    for (const auto& n : names)
        if (n.rfind(prefix + "input_blocks.", 0) == 0 && n.find(".op.weight") != std::string::npos) ++downsamplers;
    const int levels = downsamplers + 1;
    const int inputs = count_input_blocks(names, prefix);
    require(inputs > 1 && inputs % levels == 0, ErrorKind::InvalidModel,
            "cannot read the UNet layout of " + file.path() + " (" + std::to_string(inputs) + " input blocks, " +
                std::to_string(levels) + " levels)");
    const int L = inputs / levels - 1;

    std::map<std::string, WeightMapping> table;
    for (const auto& name : names) {
        if (name.rfind(prefix, 0) != 0) continue;
        const std::string s = name.substr(prefix.size());
        std::string out, rest;
        int k = 0, sub = 0;
        auto starts = [&](const char* p) { return s.rfind(p, 0) == 0; };
        if (starts("time_embed.0.")) {
            out = "time_embedding.linear_1." + s.substr(13);
        } else if (starts("time_embed.2.")) {
            out = "time_embedding.linear_2." + s.substr(13);
        } else if (starts("label_emb.0.0.")) {
            out = "add_embedding.linear_1." + s.substr(14);
        } else if (starts("label_emb.0.2.")) {
            out = "add_embedding.linear_2." + s.substr(14);
        } else if (starts("input_blocks.0.0.")) {
            out = "conv_in." + s.substr(17);
        } else if (starts("out.0.")) {
            out = "conv_norm_out." + s.substr(6);
        } else if (starts("out.2.")) {
            out = "conv_out." + s.substr(6);
        } else if (starts("input_blocks.") && split_indices(s.substr(13), &k, &sub, &rest)) {
            const int level = (k - 1) / (L + 1), j = (k - 1) % (L + 1);
            const std::string block = "down_blocks." + std::to_string(level) + ".";
            if (j == L && sub == 0 && rest.rfind("op.", 0) == 0) {
                out = block + "downsamplers.0.conv." + rest.substr(3);
            } else if (j < L && sub == 0 && rename_resnet(rest, &rest)) {
                out = block + "resnets." + std::to_string(j) + "." + rest;
            } else if (j < L && sub == 1) {
                out = block + "attentions." + std::to_string(j) + "." + rest;
            }
        }
        if (out.empty() && starts("middle_block.")) {
            const std::string r = s.substr(13);
            const size_t dot = r.find('.');
            const std::optional<int> index = dot == std::string::npos ? std::nullopt : layer_index(r.substr(0, dot));
            if (index) {
                const int idx = *index;
                std::string inner = r.substr(dot + 1);
                if ((idx == 0 || idx == 2) && rename_resnet(inner, &inner))
                    out = "mid_block.resnets." + std::to_string(idx / 2) + "." + inner;
                else if (idx == 1)
                    out = "mid_block.attentions.0." + inner;
            }
        }
        if (out.empty() && starts("output_blocks.") && split_indices(s.substr(14), &k, &sub, &rest)) {
            const int level = k / (L + 1), j = k % (L + 1);
            const std::string block = "up_blocks." + std::to_string(level) + ".";
            if (sub == 0 && rename_resnet(rest, &rest)) {
                out = block + "resnets." + std::to_string(j) + "." + rest;
            } else if ((sub == 1 || sub == 2) && rest.rfind("conv.", 0) == 0) {
                out = block + "upsamplers.0.conv." + rest.substr(5);
            } else if (sub == 1) {
                out = block + "attentions." + std::to_string(j) + "." + rest;
            }
        }
        if (out.empty()) {
            if (unknown) unknown->push_back(name);
            continue;
        }
        table[out] = WeightMapping{name, WeightMapping::Op::Copy, 0, 1};
    }
    return table;
}

std::string unet_ldm_name(const std::string& name, const UNetConfig& c, const std::string& prefix) {
    static const std::regex block(R"(^(down_blocks|up_blocks)\.(\d+)\.(resnets|attentions|downsamplers|upsamplers)\.(\d+)\.(.*)$)");
    static const std::regex mid(R"(^mid_block\.(resnets|attentions)\.(\d+)\.(.*)$)");
    const std::pair<const char*, const char*> fixed[] = {
        {"time_embedding.linear_1.", "time_embed.0."}, {"time_embedding.linear_2.", "time_embed.2."},
        {"add_embedding.linear_1.", "label_emb.0.0."}, {"add_embedding.linear_2.", "label_emb.0.2."},
        {"conv_in.", "input_blocks.0.0."},           {"conv_norm_out.", "out.0."},
        {"conv_out.", "out.2."}};
    for (const auto& [from, to] : fixed)
        if (name.rfind(from, 0) == 0) return prefix + to + name.substr(std::string(from).size());
    auto resnet_part = [](const std::string& rest) {
        for (const auto& [ldm, diffusers] : kResnetRenames)
            if (rest.rfind(diffusers, 0) == 0) return ldm + rest.substr(std::string(diffusers).size());
        return rest;
    };
    const int L = c.layers_per_block;
    std::smatch m;
    if (std::regex_match(name, m, block)) {
        const int level = std::stoi(m[2]), j = std::stoi(m[4]);
        const std::string kind = m[3], rest = m[5];
        if (m[1] == "down_blocks") {
            const std::string at = "input_blocks." + std::to_string(1 + level * (L + 1) + j);
            if (kind == "resnets") return prefix + at + ".0." + resnet_part(rest);
            if (kind == "attentions") return prefix + at + ".1." + rest;
            return prefix + "input_blocks." + std::to_string((level + 1) * (L + 1)) + ".0.op." +
                   rest.substr(rest.rfind("conv.", 0) == 0 ? 5 : 0);
        }
        const std::string at = "output_blocks." + std::to_string(level * (L + 1) + j);
        if (kind == "resnets") return prefix + at + ".0." + resnet_part(rest);
        if (kind == "attentions") return prefix + at + ".1." + rest;
        const int down_level = c.levels() - 1 - level;
        const bool attn = down_level >= 0 && down_level < c.levels() && c.level_has_attention[down_level];
        return prefix + "output_blocks." + std::to_string(level * (L + 1) + L) + (attn ? ".2." : ".1.") + rest;
    }
    if (std::regex_match(name, m, mid)) {
        const int k = std::stoi(m[2]);
        if (m[1] == "resnets") return prefix + "middle_block." + std::to_string(2 * k) + "." + resnet_part(m[3]);
        return prefix + "middle_block.1." + std::string(m[3]);
    }
    return "";
}

UNetConfig unet_config_from_ldm(const WeightSource& src, HeadRule rule, int pooled_text_dim) {
    UNetConfig c;
    auto shape_of = [&](const std::string& n) { return src.load(n).shape(); };
    require(src.has("conv_in.weight"), ErrorKind::InvalidModel, "no UNet found in " + src.describe());
    const Shape conv_in = shape_of("conv_in.weight");
    c.in_channels = static_cast<int>(conv_in[1]);
    require(c.in_channels == 4, ErrorKind::Unsupported,
            "UNet with " + std::to_string(c.in_channels) + " input channels (inpainting or other variants)");
    if (src.has("conv_out.weight")) c.out_channels = static_cast<int>(shape_of("conv_out.weight")[0]);
    for (int level = 0;; ++level) {
        const std::string block = "down_blocks." + std::to_string(level) + ".";
        if (!src.has(block + "resnets.0.conv1.weight")) break;
        c.block_out_channels.push_back(static_cast<int>(shape_of(block + "resnets.0.conv1.weight")[0]));
        const bool attn = src.has(block + "attentions.0.proj_in.weight");
        c.level_has_attention.push_back(attn);
        int depth = 0;
        while (attn && src.has(block + "attentions.0.transformer_blocks." + std::to_string(depth) + ".norm1.weight"))
            ++depth;
        c.transformer_depth.push_back(std::max(depth, 1));
    }
    require(!c.block_out_channels.empty(), ErrorKind::InvalidModel,
            "missing " + src.display_name("down_blocks.0.resnets.0.conv1.weight") + " in " + src.describe() +
                ": the UNet's first level, from which its widths are read");
    c.layers_per_block = 0;
    while (src.has("down_blocks.0.resnets." + std::to_string(c.layers_per_block) + ".conv1.weight"))
        ++c.layers_per_block;
    c.mid_transformer_depth = 0;
    while (src.has("mid_block.attentions.0.transformer_blocks." + std::to_string(c.mid_transformer_depth) +
                   ".norm1.weight"))
        ++c.mid_transformer_depth;
    // Cross-attention width: the key projection of any cross-attention.
    for (const auto& n : src.names()) {
        if (n.ends_with("attn2.to_k.weight")) {
            c.cross_attention_dim = static_cast<int>(shape_of(n)[1]);
            break;
        }
    }
    // Heads and norm groups are not stored. SD 1.x keeps 8 heads at every level, SD 2.x and SDXL
    // 64-wide heads, all 32 norm groups. Test-size models (first level narrower than 320: the
    // fixtures' and the kiln-shapes demo model) use 4 heads (SD 1.x) or 8-wide heads (SD 2.x, SDXL),
    // and 32 groups unless the first level has fewer than 32 channels (the fixtures': 8 groups).
    // kiln-shapes' choice (4 heads, 32 groups) was confirmed by its denoising loss on rendered
    // training-like images, which is lowest for exactly that choice (see docs/MODELS.md).
    const int ch0 = c.block_out_channels.at(0);
    const bool test_size = ch0 < 320;
    c.norm_groups = ch0 >= 32 ? 32 : 8;
    for (int ch : c.block_out_channels) {
        if (rule == HeadRule::FixedCount) c.heads.push_back(test_size ? 4 : 8);
        else c.heads.push_back(std::max(1, ch / (test_size ? 8 : 64)));
    }
    if (src.has("add_embedding.linear_1.weight")) {
        c.projection_class_embeddings_input_dim = static_cast<int>(shape_of("add_embedding.linear_1.weight")[1]);
        const int rest = c.projection_class_embeddings_input_dim - pooled_text_dim;
        require(pooled_text_dim > 0 && rest > 0 && rest % 6 == 0, ErrorKind::InvalidModel,
                "cannot read SDXL's size conditioning width from " + src.describe());
        c.addition_time_embed_dim = rest / 6;  // six time ids: original size, crop, target size
    }
    return c;
}

}  // namespace kiln
