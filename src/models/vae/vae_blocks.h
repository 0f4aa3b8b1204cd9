// The building blocks of diffusers' AutoencoderKL Encoder and Decoder: ResnetBlock2D without a time
// embedding, the mid block's single-head spatial self-attention, and the down/up samplers.
// Every GroupNorm here uses eps 1e-6 (diffusers passes resnet_eps=1e-6 throughout the VAE).
#pragma once
#include <optional>
#include <string>

#include "core/tensor.h"
#include "models/weight_source.h"

namespace kiln::vae {

inline constexpr float kNormEps = 1e-6f;

struct Conv {
    Tensor w, b;
    // Reads prefix.weight [out,in,k,k] and prefix.bias [out].
    static Conv load(WeightReader& r, const std::string& prefix, int64_t in, int64_t out, int64_t k);
};

struct Norm {
    Tensor w, b;
    static Norm load(WeightReader& r, const std::string& prefix, int64_t channels);
};

// conv (3x3, padding 1) of silu(GroupNorm(eps 1e-6)(x)), the pre-activated conv of the VAE, without
// materialising the normalised x.
Tensor norm_silu_conv(const Tensor& x, const Norm& n, int groups, const Conv& conv);

struct Resnet {
    Norm norm1, norm2;
    Conv conv1, conv2;
    std::optional<Conv> shortcut;  // 1x1, when the channel count changes
    static Resnet load(WeightReader& r, const std::string& prefix, int64_t in, int64_t out);
    // (x or shortcut(x)) + conv2(silu(norm2(conv1(silu(norm1(x)))))); output_scale_factor is 1.
    // Takes x (move it in): its storage holds the sum, or conv1's output when there is a shortcut.
    Tensor forward(Tensor x, int groups) const;
};

struct SpatialAttention {
    Norm norm;
    Tensor q_w, q_b, k_w, k_b, v_w, v_b, out_w, out_b;  // linears [C,C] (1x1 convs in original files)
    static SpatialAttention load(WeightReader& r, const std::string& prefix, int64_t channels);
    // x += to_out(attention(to_q(n), to_k(n), to_v(n))) with n = group_norm(x) over the H*W tokens,
    // one head of width C.
    void add_to(Tensor& x, int groups) const;
};

struct MidBlock {
    Resnet first, second;
    std::optional<SpatialAttention> attention;
    static MidBlock load(WeightReader& r, const std::string& prefix, int64_t channels, bool with_attention);
    Tensor forward(Tensor x, int groups) const;
};

// diffusers' Downsample2D as the VAE configures it: pad the right and bottom by one zero, then a 3x3
// conv of stride 2 without padding (the asymmetric padding of the original LDM code).
Tensor downsample(const Tensor& x, const Conv& conv);
// x [N, C, H, W] (host) with one zero row below and one zero column on the right: the encoder's asymmetric pad.
Tensor downsample_pad(const Tensor& x);

// Upsample2D: nearest-neighbour 2x, then a 3x3 conv with padding 1.
Tensor upsample(const Tensor& x, const Conv& conv);

}  // namespace kiln::vae
