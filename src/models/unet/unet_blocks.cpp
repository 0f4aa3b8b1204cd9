#include "models/unet/unet_blocks.h"

#include "kiln/error.h"
#include "ops/ops.h"

namespace kiln {

void Linear::load(WeightReader& r, const std::string& name, int64_t in, int64_t out, bool has_bias) {
    weight = r.get_matrix(name + ".weight", {out, in});
    if (has_bias) bias = r.get(name + ".bias", {out});
}

Tensor Linear::operator()(const Tensor& x) const { return ops::linear(x, weight, bias.empty() ? nullptr : &bias); }

void Conv2d::load(WeightReader& r, const std::string& name, int64_t in, int64_t out, int kernel, int stride_) {
    weight = r.get_matrix(name + ".weight", {out, in, kernel, kernel});
    bias = r.get(name + ".bias", {out});
    stride = stride_;
    padding = kernel / 2;
}

Tensor Conv2d::operator()(const Tensor& x) const { return ops::conv2d(x, weight, &bias, stride, padding); }

void GroupNorm::load(WeightReader& r, const std::string& name, int64_t channels, int groups_, float eps_) {
    gamma = r.get(name + ".weight", {channels});
    beta = r.get(name + ".bias", {channels});
    groups = groups_;
    eps = eps_;
}

Tensor GroupNorm::operator()(const Tensor& x) const { return ops::group_norm(x, groups, gamma, beta, eps); }

void LayerNorm::load(WeightReader& r, const std::string& name, int64_t dim, float eps_) {
    gamma = r.get(name + ".weight", {dim});
    beta = r.get(name + ".bias", {dim});
    eps = eps_;
}

Tensor LayerNorm::operator()(const Tensor& x) const { return ops::layer_norm(x, gamma, beta, eps); }

void ResnetBlock::load(WeightReader& r, const std::string& name, int64_t in, int64_t out, int groups, float eps) {
    out_channels = out;
    norm1.load(r, name + ".norm1", in, groups, eps);
    conv1.load(r, name + ".conv1", in, out, 3);
    norm2.load(r, name + ".norm2", out, groups, eps);
    conv2.load(r, name + ".conv2", out, out, 3);
    has_shortcut = in != out;
    if (has_shortcut) shortcut.load(r, name + ".conv_shortcut", in, out, 1);
}

Tensor ResnetBlock::operator()(const Tensor& x, const Tensor& time) const {
    // conv(silu(norm(.))) fused: the normalised copies are never made.
    // The time embedding is added per image and channel as conv1's output is written, read at its column.
    Tensor h = ops::conv2d_group_norm_silu_plus(x, norm1.groups, norm1.gamma, norm1.beta, norm1.eps, conv1.weight,
                                                &conv1.bias, time, time_offset, conv1.stride, conv1.padding);
    if (has_shortcut) {  // conv2 adds onto the shortcut's fresh output: no pass of its own for the residual,
        // nor for the shortcut's bias, which is added to it as conv2's output is (y_bias)
        Tensor out = ops::conv2d(x, shortcut.weight, nullptr, shortcut.stride, shortcut.padding);
        ops::conv2d_group_norm_silu_add_(out, h, norm2.groups, norm2.gamma, norm2.beta, norm2.eps, conv2.weight,
                                         &conv2.bias, conv2.stride, conv2.padding, &shortcut.bias);
        return out;
    }
    h = ops::conv2d_group_norm_silu(h, norm2.groups, norm2.gamma, norm2.beta, norm2.eps, conv2.weight, &conv2.bias,
                                    conv2.stride, conv2.padding);
    ops::add_(h, x);
    return h;
}

void Attention::load(WeightReader& r, const std::string& name, int64_t dim_, int heads_, bool self) {
    dim = dim_;
    if (self)
        to_qkv.weight = r.get_matrix_stack({name + ".to_q.weight", name + ".to_k.weight", name + ".to_v.weight"},
                                           {dim, dim});
    else
        to_q.load(r, name + ".to_q", dim, dim, false);
    to_out.load(r, name + ".to_out.0", dim, dim);
    heads = heads_;
    require(dim % heads == 0, ErrorKind::InvalidModel,
            name + ": width " + std::to_string(dim) + " is not a multiple of " + std::to_string(heads) + " heads");
}

void Attention::add_to(Tensor& residual, const Tensor& x, const Tensor* kv) const {
    const bool self = !to_qkv.weight.empty();
    require(self == !kv, ErrorKind::InvalidArgument,
            self ? "self-attention given a context" : "cross-attention without a context");
    const Tensor mixed =
        self ? ops::attention_qkv(to_qkv(x), heads) : ops::attention_kv(to_q(x), *kv, heads, kv_column);
    ops::linear_add_(residual, mixed, to_out.weight, to_out.bias.empty() ? nullptr : &to_out.bias);
}

void TransformerBlock::load(WeightReader& r, const std::string& name, int64_t dim, int heads) {
    norm1.load(r, name + ".norm1", dim);
    attn1.load(r, name + ".attn1", dim, heads, true);
    norm2.load(r, name + ".norm2", dim);
    attn2.load(r, name + ".attn2", dim, heads, false);
    norm3.load(r, name + ".norm3", dim);
    ff_in.load(r, name + ".ff.net.0.proj", dim, dim * 8);
    ff_out.load(r, name + ".ff.net.2", dim * 4, dim);
}

void TransformerBlock::apply(Tensor& x, const std::vector<Tensor>& kv) const {
    attn1.add_to(x, norm1(x), nullptr);
    attn2.add_to(x, norm2(x), &kv.at(size_t(attn2.kv_group)));
    ops::linear_add_(x, ops::geglu(ff_in(norm3(x))), ff_out.weight, &ff_out.bias);
}

namespace {

// Projections are 1x1 convs ([C, C, 1, 1]) in SD 1.x and linear ([C, C]) in SD 2.x / SDXL.
void load_projection(Linear& l, WeightReader& r, const std::string& name, int64_t channels) {
    Tensor w = r.get_matrix(name + ".weight");
    require(w.shape() == Shape{channels, channels} || w.shape() == Shape{channels, channels, 1, 1},
            ErrorKind::InvalidModel,
            "tensor " + r.where(name + ".weight") + " has shape " + shape_str(w.shape()) + ", expected " +
                shape_str({channels, channels}) + " or " + shape_str({channels, channels, 1, 1}));
    l.weight = std::move(w).reshaped({channels, channels});
    l.bias = r.get(name + ".bias", {channels});
}

}  // namespace

void SpatialTransformer::load(WeightReader& r, const std::string& name, int64_t channels, int heads, int depth,
                              int groups) {
    norm.load(r, name + ".norm", channels, groups, 1e-6f);
    load_projection(proj_in, r, name + ".proj_in", channels);
    blocks.resize(depth);
    for (int i = 0; i < depth; ++i)
        blocks[i].load(r, name + ".transformer_blocks." + std::to_string(i), channels, heads);
    load_projection(proj_out, r, name + ".proj_out", channels);
}

void SpatialTransformer::add_to(Tensor& x, const std::vector<Tensor>& kv) const {
    Tensor tokens = proj_in(ops::group_norm_to_nlc(x, norm.groups, norm.gamma, norm.beta, norm.eps));
    for (const TransformerBlock& b : blocks) b.apply(tokens, kv);
    ops::add_nlc_(x, proj_out(tokens));
}

}  // namespace kiln
