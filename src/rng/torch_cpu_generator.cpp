#include "rng/torch_cpu_generator.h"

#include <cmath>
#include <numbers>

#include "rng/avx2_cephes_math.h"
#include "rng/checked_numel.h"
#include "rng/fp_exact.h"

namespace kiln {

namespace {
constexpr int64_t kBlock = 16;  // normal_fill_16: 8 radii, 8 angles -> 16 normals

// torch's normal_fill_16_AVX2 on one block holding 16 uniforms in [0, 1): the first 8 give radii,
// the last 8 angles; cosines land in the first half, sines in the second.
void box_muller_block(float* d) {
    const float two_pi = static_cast<float>(2.0 * std::numbers::pi);
    for (int j = 0; j < 8; ++j) {
        const float radius = std::sqrt(-2.0f * avx2_cephes_log(1.0f - d[j]));  // 1 - u in (0, 1]
        const float theta = two_pi * d[j + 8];
        float s, c;
        avx2_cephes_sincos(theta, &s, &c);
        // torch finishes with fmadd(x, std=1, mean=0): exact, except that it turns -0 into +0.
        d[j] = radius * c + 0.0f;
        d[j + 8] = radius * s + 0.0f;
    }
}
}  // namespace

TorchCpuGenerator::TorchCpuGenerator(uint64_t seed) : engine_(seed) {}

float TorchCpuGenerator::next_uniform_float() {
    return static_cast<float>(engine_.next_u32() & 0xffffffu) * (1.0f / 16777216.0f);
}

double TorchCpuGenerator::next_uniform_double() {
    return static_cast<double>(engine_.next_u64() & ((uint64_t{1} << 53) - 1)) * (1.0 / 9007199254740992.0);
}

double TorchCpuGenerator::next_normal_double() {
    if (cached_normal_) {
        const double v = *cached_normal_;
        cached_normal_.reset();
        return v;
    }
    const double u1 = next_uniform_double();
    const double u2 = next_uniform_double();
    const double radius = std::sqrt(-2.0 * std::log1p(-u2));
    const double theta = 2.0 * std::numbers::pi * u1;
    cached_normal_ = radius * std::sin(theta);
    return radius * std::cos(theta);
}

void TorchCpuGenerator::fill_blocks(float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = next_uniform_float();
    for (int64_t i = 0; i + kBlock <= n; i += kBlock) box_muller_block(out + i);
    if (n % kBlock != 0) {
        // torch redraws the last 16 uniforms (overlapping the previous block) and transforms them.
        float* tail = out + n - kBlock;
        for (int64_t i = 0; i < kBlock; ++i) tail[i] = next_uniform_float();
        box_muller_block(tail);
    }
}

Tensor TorchCpuGenerator::randn(const Shape& shape) {
    const int64_t n = checked_numel(shape, "TorchCpuGenerator::randn");
    Tensor out{Shape(shape)};
    if (n >= kBlock) {
        fill_blocks(out.data(), n);
    } else {
        for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(next_normal_double() * 1.0 + 0.0);
    }
    return out;
}

}  // namespace kiln
