// conv2d's engine (conv2d.cpp), shared with the fused variants that change how im2col reads x
// (conv2d_group_norm_silu in conv2d.cpp, conv2d_upsample2x in conv2d_upsample.cpp) or where the
// output goes (conv2d_inplace.cpp). Every variant makes the same columns and the same sgemm calls as
// conv2d on the materialised input, so its results are those bits exactly. The exception is a 1x1
// kernel read through im2col (normalised or upsampled): conv2d reads x in one sgemm per image, the
// variant in tiles of pixels, and OpenBLAS rounds a product split that way differently (measured);
// the models fuse only 3x3 convolutions.
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

// Where the output goes instead of a new tensor. Each tile of output pixels [p0, p1) of output channels
// [o0, o0 + oc) of image n is computed by the sgemm call conv2d makes for it, only with C in scratch
// (BLAS's arithmetic does not depend on where C lies; the tests check the bits), and handed over,
// bias included, row-major [oc, p1 - p0], in conv2d's order: weight tiles, then images, then pixels.
class ConvTileSink {
public:
    virtual void take(int64_t n, int64_t o0, int64_t oc, int64_t p0, int64_t p1, const float* tile) = 0;

protected:
    ~ConvTileSink() = default;
};

// The convolution of the input `input` describes; into a new tensor, or, with a sink, tile by tile
// into the sink (then the returned tensor is empty).
Tensor conv2d_impl(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int padding,
                   int64_t im2col_budget_bytes, int64_t weight_budget_bytes, const ConvInput& input,
                   ConvTileSink* sink = nullptr);

}  // namespace kiln::ops::detail
