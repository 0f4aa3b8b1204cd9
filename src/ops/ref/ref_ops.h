// Reference implementations of every op in ops.h: the definitions written as plain loops with double
// accumulation, for the tests to check the fast ops against. Slow on purpose; never call them from
// the engine. Same signatures and semantics as kiln::ops (see ops.h).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace kiln::ops::ref {

Tensor linear(const Tensor& x, const Tensor& w, const Tensor* b);
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor* b, int stride = 1, int padding = 0);
Tensor group_norm(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta, float eps);
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps);
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, int heads, bool causal = false);
void silu_(Tensor& x);
void gelu_(Tensor& x);
void gelu_tanh_(Tensor& x);
void quick_gelu_(Tensor& x);
Tensor geglu(const Tensor& x);
Tensor upsample_nearest2x(const Tensor& x);
Tensor concat_channels(const Tensor& a, const Tensor& b);
void add_(Tensor& a, const Tensor& b);
void add_channel_bias_(Tensor& x, const Tensor& bias_nc);
void scale_(Tensor& x, float s);
Tensor nchw_to_nlc(const Tensor& x);
Tensor nlc_to_nchw(const Tensor& x, int64_t h, int64_t w);
Tensor softmax_lastdim(const Tensor& x);
Tensor timestep_embedding(const std::vector<float>& timesteps, int dim, bool flip_sin_to_cos,
                          float downscale_freq_shift, float max_period = 10000);

}  // namespace kiln::ops::ref
