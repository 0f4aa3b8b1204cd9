// Reference timestep embedding: diffusers' get_timestep_embedding transcribed line by line, each torch
// tensor operation a float32 rounding (torch computes float32 tensors in float32), each transcendental
// function correctly rounded from double:
//   half_dim = embedding_dim // 2
//   exponent = -math.log(max_period) * torch.arange(0, half_dim, dtype=torch.float32)
//   exponent = exponent / (half_dim - downscale_freq_shift)
//   emb = torch.exp(exponent)
//   emb = timesteps[:, None].float() * emb[None, :]
//   emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=-1)
//   if flip_sin_to_cos: emb = torch.cat([emb[:, half_dim:], emb[:, :half_dim]], dim=-1)
//   if embedding_dim % 2 == 1: emb = torch.nn.functional.pad(emb, (0, 1, 0, 0))
#include <cmath>

#include "ops/ref/ref_check.h"
#include "ops/ref/ref_ops.h"

namespace kiln::ops::ref {

Tensor timestep_embedding(const std::vector<float>& timesteps, int dim, bool flip_sin_to_cos,
                          float downscale_freq_shift, float max_period) {
    expect(dim >= 1, "timestep_embedding", "dim");
    const int64_t half_dim = dim / 2, count = static_cast<int64_t>(timesteps.size());
    const float log_scalar = static_cast<float>(-std::log(double(max_period)));
    const float divisor = static_cast<float>(double(half_dim) - double(downscale_freq_shift));
    std::vector<float> emb(count * 2 * half_dim);  // [count, 2 * half_dim] before flip and pad
    for (int64_t r = 0; r < count; ++r)
        for (int64_t i = 0; i < half_dim; ++i) {
            float exponent = log_scalar * static_cast<float>(i);
            exponent = exponent / divisor;
            const float freq = static_cast<float>(std::exp(double(exponent)));
            const float arg = timesteps[r] * freq;
            emb[r * 2 * half_dim + i] = static_cast<float>(std::sin(double(arg)));
            emb[r * 2 * half_dim + half_dim + i] = static_cast<float>(std::cos(double(arg)));
        }
    Tensor out({count, dim});  // the pad column stays 0
    for (int64_t r = 0; r < count; ++r)
        for (int64_t j = 0; j < 2 * half_dim; ++j) {
            const int64_t src = flip_sin_to_cos ? (j + half_dim) % (2 * half_dim) : j;
            out[r * dim + j] = emb[r * 2 * half_dim + src];
        }
    return out;
}

}  // namespace kiln::ops::ref
