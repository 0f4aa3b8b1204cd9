// Classifier-free guidance with AUTOMATIC1111's composable parts ("a cat AND a dog :0.5"), as its CFGDenoiser's
// combine_denoised (modules/sd_samplers_cfg_denoiser.py): the negative's output, plus for each part in order
// (part - negative) x (weight x scale), in float32. One part of weight 1 is diffusers' guidance,
// negative + scale x (positive - negative), to the bit.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace kiln {

// `out` holds the UNet's outputs for `batch` images: [(1 + parts) x batch, ...], the batch's rows of the
// negative first, then the batch's rows of each part. Returns [batch, ...]. The factor weight x scale is
// taken in double and rounded to float, as torch does with the product of two Python floats.
Tensor combine_composable_guidance(const Tensor& out, int64_t batch, const std::vector<double>& weights,
                                   double scale);

// [x, x, ...]: the latents [batch, ...] `copies` times over, once for the negative and once for each part.
Tensor repeat_batch(const Tensor& x, int copies);

}  // namespace kiln
