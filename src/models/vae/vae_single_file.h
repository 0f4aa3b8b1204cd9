// The VAE inside a single-file (original LDM layout) checkpoint: the rename table onto diffusers'
// AutoencoderKL names and the config read off the tensors' shapes.
#pragma once
#include <map>
#include <optional>
#include <string>

#include "io/safetensors.h"
#include "models/vae/vae_config.h"
#include "models/weight_source.h"

namespace kiln {

inline constexpr const char* kLdmVaePrefix = "first_stage_model.";

struct VaeSingleFile {
    std::map<std::string, WeightMapping> table;  // diffusers name -> tensor in the file
    VaeConfig config;
};

bool has_ldm_vae(const SafetensorsFile& file, const std::string& prefix = kLdmVaePrefix);

// Original names: encoder.down.N.block.M.*, encoder.down.N.downsample.conv, {encoder,decoder}.mid.
// {block_1, attn_1, block_2}, {encoder,decoder}.norm_out, decoder.up.N.block.M (N counts from the
// highest resolution, the reverse of diffusers' up_blocks), decoder.up.N.upsample.conv, nin_shortcut,
// attention norm/q/k/v/proj_out stored as 1x1 convs, quant_conv, post_quant_conv.
// The scaling factor is not in the file (it belongs to the architecture: 0.18215 for SD 1.x/2.x,
// 0.13025 for SDXL), so the caller gives it. norm_num_groups comes from vae_norm_groups_for_channels.
// Throws InvalidModel naming the file and tensor for anything under the prefix it cannot place.
VaeSingleFile ldm_vae_layout(const SafetensorsFile& file, float scaling_factor,
                             const std::string& prefix = kLdmVaePrefix);

// The inverse of that table (kiln convert of a diffusers folder): the WeightMapping it holds for the diffusers tensor
// `internal` of `rank` dimensions in a VAE of `levels` levels (the original name; Squeeze for the attention's [C,C]
// linears, which the original stores as 1x1 convs), or nothing when the original layout has no place for it.
std::optional<WeightMapping> ldm_vae_original(const std::string& internal, size_t rank, int levels,
                                              const std::string& prefix = kLdmVaePrefix);

}  // namespace kiln
