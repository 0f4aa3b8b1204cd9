// The UNet's building blocks with their weights: resnet blocks with time embedding, and the spatial
// transformer (self-attention, cross-attention, GEGLU feed-forward). Names follow diffusers.
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/weight_source.h"

namespace kiln {

struct Linear {
    Tensor weight, bias;  // bias empty when the layer has none
    void load(WeightReader& r, const std::string& name, int64_t in, int64_t out, bool has_bias = true);
    Tensor operator()(const Tensor& x) const;
};

struct Conv2d {
    Tensor weight, bias;
    int stride = 1, padding = 0;
    void load(WeightReader& r, const std::string& name, int64_t in, int64_t out, int kernel, int stride = 1);
    Tensor operator()(const Tensor& x) const;
};

struct GroupNorm {
    Tensor gamma, beta;
    int groups = 32;
    float eps = 1e-5f;
    void load(WeightReader& r, const std::string& name, int64_t channels, int groups, float eps);
    Tensor operator()(const Tensor& x) const;
};

struct LayerNorm {
    Tensor gamma, beta;
    float eps = 1e-5f;
    void load(WeightReader& r, const std::string& name, int64_t dim, float eps = 1e-5f);
    Tensor operator()(const Tensor& x) const;
};

// Its time projection (time_emb_proj) is not here: the UNet stacks those of all blocks of one width into one
// product (UNet::time_projections_), and hands each block its columns.
struct ResnetBlock {
    GroupNorm norm1, norm2;
    Conv2d conv1, conv2, shortcut;
    bool has_shortcut = false;
    int64_t out_channels = 0;
    int time_group = 0;        // which of the UNet's stacked time projections holds this block's
    int64_t time_offset = 0;   // and at which column
    void load(WeightReader& r, const std::string& name, int64_t in, int64_t out, int groups, float eps);
    // time: the stacked time projections of this block's width, [N, W]; this block's time_emb_proj(silu(temb))
    // is at columns [time_offset, time_offset + out_channels).
    Tensor operator()(const Tensor& x, const Tensor& time) const;
};

// Self-attention stacks its q, k and v projections into one ([3 dim, dim]): one product where there were three,
// and the attention reads the parts in place. Cross-attention's k and v projections of the context are not
// here: the UNet stacks those of all its cross-attentions of one width into one product
// (UNet::kv_projections_), read in place at kv_column.
struct Attention {
    Linear to_qkv;  // self-attention (empty for cross-attention)
    Linear to_q;    // cross-attention
    Linear to_out;
    int heads = 1;
    int64_t dim = 0;
    int kv_group = 0;        // cross-attention: which of the UNet's stacked k | v projections holds its k | v
    int64_t kv_column = 0;   // and at which column
    void load(WeightReader& r, const std::string& name, int64_t dim, int heads, bool self);
    // residual += attention of x [B, L, dim] (the output projection adds it: ops::linear_add_); kv: for
    // cross-attention the stacked k | v projection of the context holding this one's, null for self-attention.
    void add_to(Tensor& residual, const Tensor& x, const Tensor* kv) const;
};

struct TransformerBlock {
    LayerNorm norm1, norm2, norm3;
    Attention attn1, attn2;
    Linear ff_in, ff_out;  // GEGLU projection to 2 * 4 * dim, then back to dim
    void load(WeightReader& r, const std::string& name, int64_t dim, int heads);
    // x [B, L, dim], updated in place; kv: the UNet's stacked k | v projections of the context, by group.
    void apply(Tensor& x, const std::vector<Tensor>& kv) const;
};

// Transformer2DModel: group norm, projection in, transformer blocks over the h*w tokens, projection
// out, residual. A 1x1 conv projection equals a linear one on tokens, so both run as linear.
struct SpatialTransformer {
    GroupNorm norm;
    Linear proj_in, proj_out;
    std::vector<TransformerBlock> blocks;
    void load(WeightReader& r, const std::string& name, int64_t channels, int heads, int depth, int groups);
    void add_to(Tensor& x, const std::vector<Tensor>& kv) const;  // x [B, C, H, W] += the transformer's output
};

}  // namespace kiln
