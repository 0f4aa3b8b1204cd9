// The shape of a UNet2DConditionModel: from a diffusers config.json, or inferred from the tensor
// shapes of a single-file checkpoint.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "models/weight_source.h"

namespace kiln {

struct UNetConfig {
    int in_channels = 4, out_channels = 4;
    std::vector<int> block_out_channels;       // per level
    std::vector<bool> level_has_attention;     // CrossAttnDownBlock2D vs DownBlock2D, per level (down order)
    std::vector<int> heads;                    // attention heads per level (down order)
    std::vector<int> transformer_depth;        // transformer layers per level (down order)
    int mid_transformer_depth = 1;
    int layers_per_block = 2;
    int cross_attention_dim = 768;
    int norm_groups = 32;
    float norm_eps = 1e-5f;
    bool flip_sin_to_cos = true;
    float freq_shift = 0;
    // SDXL's "text_time" additional conditioning; 0 when absent.
    int addition_time_embed_dim = 0;
    int projection_class_embeddings_input_dim = 0;

    int sample_size = 0;  // diffusers' native latent size (config.json); 0 when unknown (single files)

    int levels() const { return static_cast<int>(block_out_channels.size()); }
    int time_embed_dim() const { return block_out_channels.at(0) * 4; }
};

// Throws InvalidModel naming `source` (the config file) for values of the wrong type or out of range.
UNetConfig unet_config_from_json(const nlohmann::json& config, const std::string& source = "UNet config.json");

// Single-file checkpoints (original layout, prefix "model.diffusion_model."): the rename table to
// diffusers names, and the config read from tensor shapes. `head_rule` says how heads are counted,
// which shapes cannot tell: SD 1.x uses a fixed head count, SD 2.x and SDXL a fixed head width.
std::map<std::string, WeightMapping> unet_table_from_ldm(const SafetensorsFile& file, const std::string& prefix,
                                                         std::vector<std::string>* unknown);
enum class HeadRule { FixedCount, FixedWidth };
// The original-layout name of a diffusers UNet tensor name (the inverse of the table), for messages
// about tensors a file lacks; empty when the name follows no rule.
std::string unet_ldm_name(const std::string& diffusers_name, const UNetConfig& config, const std::string& prefix);
UNetConfig unet_config_from_ldm(const WeightSource& diffusers_named, HeadRule rule, int pooled_text_dim);

}  // namespace kiln
