// torch.randn on a CPU generator, bit for bit:
//   torch.randn(shape, generator=torch.Generator("cpu").manual_seed(seed))
// Successive randn calls continue the stream exactly as successive torch.randn calls on one
// generator do (the mt19937 state and the cached second Box-Muller value carry over).
#pragma once
#include <cstdint>
#include <optional>

#include "core/noise.h"
#include "rng/mt19937.h"

namespace kiln {

class TorchCpuGenerator : public NoiseGenerator {
public:
    // Like torch, only the low 32 bits of the seed matter.
    explicit TorchCpuGenerator(uint64_t seed);

    // torch takes one of two paths by element count, and the two do not compose: a call for
    // n >= 16 values fills 16-value Box-Muller blocks from 24-bit float uniforms (redrawing 16
    // uniforms for the last block when n is not a multiple of 16), while a call for n < 16 values
    // draws double-precision Box-Muller pairs and keeps the unused second value for the next
    // small call. So randn({a}) then randn({b}) is in general NOT randn({a + b}).
    Tensor randn(const Shape& shape) override;

private:
    void fill_blocks(float* out, int64_t n);  // the n >= 16 path (torch's normal_fill)
    double next_normal_double();               // the n < 16 path (at::normal_distribution<double>)
    float next_uniform_float();                // 24 random bits / 2^24
    double next_uniform_double();              // 53 random bits / 2^53 from a 64-bit draw

    Mt19937 engine_;
    std::optional<double> cached_normal_;  // torch's next_double_normal_sample
};

}  // namespace kiln
