// conv2d's engine (conv2d.cpp), shared with the fused variants that change how im2col reads x:
// conv2d_group_norm_silu (conv2d.cpp) and conv2d_upsample2x (conv2d_upsample.cpp). Every variant makes
// the same columns and the same sgemm calls as conv2d on the materialised input, so its results are
// those bits exactly. (A 1x1 kernel is the exception: conv2d reads x in one sgemm per image, the
// variants through im2col in tiles, whose sums OpenBLAS need not round alike; the models fuse only 3x3.)
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace kiln::ops::detail {

// Per (image, channel) plane: the norm im2col applies to x as it reads it (conv2d_group_norm_silu).
struct InputNorm {
    std::vector<float> scale, shift;
};

// What the convolution's input is, in terms of x.
struct ConvInput {
    const InputNorm* norm = nullptr;  // silu(x * scale + shift) per plane
    bool upsample2x = false;          // upsample_nearest2x(x)
    const char* op = "conv2d";        // the public op's name, for error messages
};

Tensor conv2d_impl(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int padding,
                   int64_t im2col_budget_bytes, int64_t weight_budget_bytes, const ConvInput& input);

}  // namespace kiln::ops::detail
