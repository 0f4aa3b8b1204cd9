// conv2d_upsample2x: the convolution after a nearest-2x upsampling (Upsample2D in the UNet and the VAE
// decoder) without the upsampled tensor. That tensor is 4x its input; in the VAE decoder's last
// upsampler (256 channels to 512x512) it alone was 256 MiB at the decode's memory peak. im2col reads
// each pixel of x for its 2x2 block instead (im2col.h, ConvGeometry::upsample2x), giving the columns
// conv2d builds from the upsampled copy, tile for tile, so the results are the same bits.
#include "ops/checks.h"
#include "ops/conv2d_impl.h"
#include "ops/device_ops.h"
#include "ops/device_weight.h"
#include "ops/ops.h"
#include "ops/tuning.h"

namespace kiln::ops {

Tensor conv2d_upsample2x(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int padding) {
    if (x.on_device()) return device_ops(x).conv2d_upsample2x(x, *DeviceWeight(x, w), b, stride, padding);
    return detail::conv2d_upsample2x_tiled(x, w, b, stride, padding, detail::kIm2colBudgetBytes);
}

Tensor detail::conv2d_upsample2x_tiled(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int padding,
                                       int64_t im2col_budget_bytes, int64_t weight_budget_bytes) {
    return conv2d_impl(x, w, b, stride, padding, im2col_budget_bytes, weight_budget_bytes,
                       {nullptr, true, "conv2d_upsample2x"});
}

}  // namespace kiln::ops
