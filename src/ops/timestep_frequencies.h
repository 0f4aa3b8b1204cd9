// The frequencies of diffusers' timestep embedding, exp(-log(max_period) * i / (half - shift)) for
// i < half, in torch's float32 order (ops::timestep_embedding's first half; see its file). A backend that
// evaluates the sines and cosines itself uploads these, so its arguments are the CPU's to the bit.
#pragma once
#include <vector>

namespace kiln::ops {

std::vector<float> timestep_frequencies(int half, float downscale_freq_shift, float max_period);

}  // namespace kiln::ops
