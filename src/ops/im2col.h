// im2col for a range of output pixels, so that a convolution becomes sgemm on a bounded buffer.
#pragma once
#include <cstdint>

namespace kiln::ops::detail {

struct ConvGeometry {
    int64_t channels, height, width;  // input image, as the convolution sees it
    int64_t kh, kw, stride, padding;
    int64_t out_h, out_w;
    // The convolution's input is upsample_nearest2x(x): x holds [C, height / 2, width / 2] and im2col
    // reads each of its pixels for a 2x2 block, so the upsampled copy is never made (conv2d_upsample2x).
    bool upsample2x = false;
};

// Writes the columns of output pixels [p0, p1) (row-major pixel index oy * out_w + ox) of one image
// x [C, H, W] (or [C, H / 2, W / 2] with g.upsample2x) into col [C * kh * kw, p1 - p0]; row
// (c * kh + i) * kw + j matches w [O, C, kh, kw] flattened to [O, C * kh * kw]. Taps outside the
// image read as 0 (zero padding). Runs OpenMP threads over the rows; call it outside a parallel region.
// With `affine` (scale[c], shift[c] per input channel), every in-image tap becomes
// silu(v * scale[c] + shift[c]), exactly as group_norm then silu_ compute it; padding stays 0.
struct ChannelAffine {
    const float* scale;
    const float* shift;
};
void im2col_tile(const float* x, const ConvGeometry& g, int64_t p0, int64_t p1, float* col,
                 const ChannelAffine* affine = nullptr);

}  // namespace kiln::ops::detail
