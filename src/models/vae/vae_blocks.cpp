#include "models/vae/vae_blocks.h"

#include <cstring>

#include "kiln/error.h"
#include "ops/ops.h"

namespace kiln::vae {

Conv Conv::load(WeightReader& r, const std::string& prefix, int64_t in, int64_t out, int64_t k) {
    return Conv{r.get_matrix(prefix + ".weight", {out, in, k, k}), r.get(prefix + ".bias", {out})};
}

Norm Norm::load(WeightReader& r, const std::string& prefix, int64_t channels) {
    return Norm{r.get(prefix + ".weight", {channels}), r.get(prefix + ".bias", {channels})};
}

Tensor norm_silu_conv(const Tensor& x, const Norm& n, int groups, const Conv& conv) {
    return ops::conv2d_group_norm_silu(x, groups, n.w, n.b, kNormEps, conv.w, &conv.b, 1, 1);
}

Resnet Resnet::load(WeightReader& r, const std::string& prefix, int64_t in, int64_t out) {
    Resnet res;
    res.norm1 = Norm::load(r, prefix + ".norm1", in);
    res.conv1 = Conv::load(r, prefix + ".conv1", in, out, 3);
    res.norm2 = Norm::load(r, prefix + ".norm2", out);
    res.conv2 = Conv::load(r, prefix + ".conv2", out, out, 3);
    if (in != out) res.shortcut = Conv::load(r, prefix + ".conv_shortcut", in, out, 1);
    return res;
}

Tensor Resnet::forward(Tensor x, int groups) const {
    // At full size each activation is 128-256 MiB, so no more than two are alive: the normalised
    // copies are never made (fused into the convs), conv2's output is added onto the residual tile by
    // tile, and with a shortcut, conv1 writes over x once the shortcut has read it. The sums are
    // add_'s (one rounding of the same two values), so the bits are those of the plain composition.
    if (shortcut) {
        Tensor out = ops::conv2d(x, shortcut->w, &shortcut->b);
        const Tensor h = ops::conv2d_group_norm_silu_inplace(std::move(x), groups, norm1.w, norm1.b, kNormEps,
                                                             conv1.w, &conv1.b, 1, 1);
        ops::conv2d_group_norm_silu_add_(out, h, groups, norm2.w, norm2.b, kNormEps, conv2.w, &conv2.b, 1, 1);
        return out;
    }
    const Tensor h = norm_silu_conv(x, norm1, groups, conv1);
    ops::conv2d_group_norm_silu_add_(x, h, groups, norm2.w, norm2.b, kNormEps, conv2.w, &conv2.b, 1, 1);
    return x;
}

SpatialAttention SpatialAttention::load(WeightReader& r, const std::string& prefix, int64_t c) {
    SpatialAttention a;
    a.norm = Norm::load(r, prefix + ".group_norm", c);
    a.q_w = r.get_matrix(prefix + ".to_q.weight", {c, c});
    a.q_b = r.get(prefix + ".to_q.bias", {c});
    a.k_w = r.get_matrix(prefix + ".to_k.weight", {c, c});
    a.k_b = r.get(prefix + ".to_k.bias", {c});
    a.v_w = r.get_matrix(prefix + ".to_v.weight", {c, c});
    a.v_b = r.get(prefix + ".to_v.bias", {c});
    a.out_w = r.get_matrix(prefix + ".to_out.0.weight", {c, c});
    a.out_b = r.get(prefix + ".to_out.0.bias", {c});
    return a;
}

void SpatialAttention::add_to(Tensor& x, int groups) const {
    Tensor q, k, v;
    {
        Tensor tokens = ops::group_norm_to_nlc(x, groups, norm.w, norm.b, kNormEps);
        q = ops::linear(tokens, q_w, &q_b);
        k = ops::linear(tokens, k_w, &k_b);
        v = ops::linear(tokens, v_w, &v_b);
    }
    // ops::attention works through blocks of query rows, so the [L, L] score matrix never exists whole.
    Tensor mixed = ops::attention(q, k, v, 1);
    q = Tensor();
    k = Tensor();
    v = Tensor();
    ops::add_nlc_(x, ops::linear(mixed, out_w, &out_b));
}

MidBlock MidBlock::load(WeightReader& r, const std::string& prefix, int64_t channels, bool with_attention) {
    MidBlock m;
    m.first = Resnet::load(r, prefix + ".resnets.0", channels, channels);
    if (with_attention) m.attention = SpatialAttention::load(r, prefix + ".attentions.0", channels);
    m.second = Resnet::load(r, prefix + ".resnets.1", channels, channels);
    return m;
}

Tensor MidBlock::forward(Tensor x, int groups) const {
    Tensor h = first.forward(std::move(x), groups);
    if (attention) attention->add_to(h, groups);
    return second.forward(std::move(h), groups);
}

Tensor downsample(const Tensor& x, const Conv& conv) {
    // ops::conv2d pads symmetrically; the one-sided pad is made here, on the host (once per encode).
    if (x.on_device()) return ops::conv2d(ops::on_device_of(downsample_pad(x.to_host()), conv.w), conv.w, &conv.b, 2, 0);
    return ops::conv2d(downsample_pad(x), conv.w, &conv.b, 2, 0);
}

Tensor downsample_pad(const Tensor& x) {
    const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
    Tensor padded({n, c, h + 1, w + 1});
    for (int64_t plane = 0; plane < n * c; ++plane)
        for (int64_t y = 0; y < h; ++y)
            std::memcpy(padded.data() + (plane * (h + 1) + y) * (w + 1), x.data() + (plane * h + y) * w,
                        sizeof(float) * w);
    return padded;
}

Tensor upsample(const Tensor& x, const Conv& conv) {
    // Fused: the upsampled copy (4x x; 256 MiB in SD's last upsampler at 512x512) is never made.
    return ops::conv2d_upsample2x(x, conv.w, &conv.b, 1, 1);
}

}  // namespace kiln::vae
