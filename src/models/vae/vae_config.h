// The shape of an AutoencoderKL (the SD VAE), as diffusers' vae/config.json describes it.
#pragma once
#include <string>
#include <vector>

namespace kiln {

// The defaults are diffusers' AutoencoderKL defaults (what a config.json that omits a key means);
// SD's VAEs have block_out_channels {128, 256, 512, 512} and layers_per_block 2.
struct VaeConfig {
    std::vector<int> block_out_channels = {64};
    int layers_per_block = 1;
    int in_channels = 3, out_channels = 3;
    int latent_channels = 4;
    int norm_num_groups = 32;
    float scaling_factor = 0.18215f;  // latents = scaling_factor * (sample - shift_factor)
    float shift_factor = 0.0f;        // null in SD 1.x/2.x/XL configs
    bool mid_block_add_attention = true;
    bool use_quant_conv = true, use_post_quant_conv = true;

    int downsample_factor() const { return 1 << (static_cast<int>(block_out_channels.size()) - 1); }
    // Throws InvalidModel naming `source` when the numbers cannot describe a working model.
    void validate(const std::string& source) const;
};

// Parses diffusers' AutoencoderKL config.json; other block types or activations are Unsupported.
VaeConfig parse_vae_config(const std::string& json_text, const std::string& source);
VaeConfig load_vae_config(const std::string& path);  // reads the file; IO error if it cannot

// GroupNorm groups of a VAE whose first block has `first_channels` channels. Files do not record
// them, so single-file checkpoints need this rule: every real SD VAE uses 32 groups (its first block
// has 128 channels); the tiny test VAEs (8 channels first) use 8, i.e. min(32, first_channels).
int vae_norm_groups_for_channels(int first_channels);

}  // namespace kiln
