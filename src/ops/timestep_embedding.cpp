// diffusers' get_timestep_embedding, step by step in torch's float32 order:
//   exponent = -log(max_period) * arange(half, float32)   (the python scalar becomes float32)
//   exponent = exponent / (half - shift)                   (a true float division)
//   freq = exp(exponent); arg = t * freq                   (float32)
//   cat(sin(arg), cos(arg)), swapped halves if flip_sin_to_cos, a zero column if dim is odd.
// exp/sin/cos are evaluated in double and rounded once, i.e. correctly rounded; torch's vectorised
// versions are within 1 ulp of that.
#include <cmath>

#include "kiln/error.h"
#include "ops/device_ops.h"
#include "ops/ops.h"
#include "ops/timestep_frequencies.h"

namespace kiln::ops {

std::vector<float> timestep_frequencies(int half, float downscale_freq_shift, float max_period) {
    // torch computes half - shift in python (double) and then uses it as a float32 scalar.
    const float denominator = static_cast<float>(static_cast<double>(half) - static_cast<double>(downscale_freq_shift));
    const float neg_log_period = static_cast<float>(-std::log(static_cast<double>(max_period)));
    std::vector<float> freq(half > 0 ? half : 0);
    for (int i = 0; i < half; ++i) {
        const float exponent = (neg_log_period * static_cast<float>(i)) / denominator;
        freq[i] = static_cast<float>(std::exp(static_cast<double>(exponent)));
    }
    return freq;
}

Tensor timestep_embedding(const std::vector<float>& timesteps, int dim, bool flip_sin_to_cos,
                          float downscale_freq_shift, float max_period) {
    require(dim >= 1, ErrorKind::InvalidArgument,
            "ops::timestep_embedding: dim " + std::to_string(dim) + " must be >= 1");
    const int half = dim / 2;
    require(half == 0 || static_cast<float>(half) - downscale_freq_shift != 0.0f, ErrorKind::InvalidArgument,
            "ops::timestep_embedding: dim " + std::to_string(dim) + " with downscale_freq_shift " +
                std::to_string(downscale_freq_shift) + " divides by zero (half - shift = 0)");
    require(max_period > 0.0f, ErrorKind::InvalidArgument, "ops::timestep_embedding: max_period must be > 0");

    const int64_t count = static_cast<int64_t>(timesteps.size());
    Tensor emb({count, dim});
    OpScope scope(OpKind::TimestepEmbedding);
    const std::vector<float> freq = timestep_frequencies(half, downscale_freq_shift, max_period);
    const int sin_at = flip_sin_to_cos ? half : 0, cos_at = flip_sin_to_cos ? 0 : half;
    for (int64_t r = 0; r < count; ++r) {
        float* row = emb.data() + r * dim;
        for (int i = 0; i < half; ++i) {
            const double arg = static_cast<double>(timesteps[r] * freq[i]);  // the float32 product
            row[sin_at + i] = static_cast<float>(std::sin(arg));
            row[cos_at + i] = static_cast<float>(std::cos(arg));
        }
    }
    return emb;
}

Tensor timestep_embedding(const Tensor& timesteps, int dim, bool flip_sin_to_cos, float downscale_freq_shift,
                          DType out_type, float max_period) {
    if (timesteps.on_device())
        return device_ops(timesteps)
            .timestep_embedding(timesteps, dim, flip_sin_to_cos, downscale_freq_shift, max_period, out_type);
    require(out_type == DType::F32, ErrorKind::InvalidArgument, "ops::timestep_embedding: host embeddings are float32");
    return timestep_embedding(timesteps.values(), dim, flip_sin_to_cos, downscale_freq_shift, max_period);
}

Tensor on_device_of(Tensor x, const Tensor& like) {
    if (like.on_device()) {
        if (x.on_device() && &x.backend() == &like.backend() && x.dtype() == like.dtype()) return x;
        return x.to_device(like.backend(), like.dtype());
    }
    if (!x.on_device() && x.dtype() == DType::F32) return x;
    return x.to_host();
}

}  // namespace kiln::ops
