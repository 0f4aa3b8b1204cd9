#include "rng/torch_cuda_generator.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kiln/error.h"
#include "rng/checked_numel.h"
#include "rng/cuda_float_math.h"
#include "rng/philox.h"
#include "rng/fp_exact.h"

namespace kiln {

namespace {
constexpr int64_t kBlockSize = 256;  // torch's block_size_bound
constexpr int kUnroll = 4;           // one float4 from curand_normal4 per loop trip

// cuRAND's _curand_box_muller(a, b) as compiled for the GPU; returns (s*sin, s*cos).
void curand_box_muller(uint32_t a, uint32_t b, float* first, float* second) {
    const float two_pow_minus_32 = 2.3283064e-10f;            // CURAND_2POW32_INV (exactly 2^-32)
    const float step = two_pow_minus_32 * 6.2831855f;         // CURAND_2POW32_INV_2PI
    const float u = std::fma(static_cast<float>(a), two_pow_minus_32, two_pow_minus_32 / 2.0f);
    const float v = std::fma(static_cast<float>(b), step, step / 2.0f);  // nvcc fuses this mul+add
    const float s = std::sqrt(-2.0f * cuda_logf(u));
    float sn, cs;
    cuda_sincosf_approx(v, &sn, &cs);
    *first = sn * s;
    *second = cs * s;
}
}  // namespace

TorchCudaGenerator::TorchCudaGenerator(uint64_t seed, int multiprocessors, int max_threads_per_multiprocessor)
    : seed_(seed), multiprocessors_(multiprocessors), max_threads_per_multiprocessor_(max_threads_per_multiprocessor) {
    require(multiprocessors >= 1, ErrorKind::InvalidArgument,
            "TorchCudaGenerator: multiprocessor count must be positive, got " + std::to_string(multiprocessors));
    require(max_threads_per_multiprocessor >= kBlockSize, ErrorKind::InvalidArgument,
            "TorchCudaGenerator: max threads per multiprocessor must be at least 256, got " +
                std::to_string(max_threads_per_multiprocessor));
}

Tensor TorchCudaGenerator::randn(const Shape& shape) {
    const int64_t n = checked_numel(shape, "TorchCudaGenerator::randn");
    Tensor out{Shape(shape)};
    if (n == 0) return out;  // torch returns before touching the generator
    // checked_numel caps n below 2^31, so torch's split of larger launches into 32-bit-indexable
    // pieces (each with its own Philox offset) never arises.

    // calc_execution_policy
    const int64_t blocks_per_sm = max_threads_per_multiprocessor_ / kBlockSize;
    const int64_t grid = std::min<int64_t>((n + kBlockSize - 1) / kBlockSize, multiprocessors_ * blocks_per_sm);
    const int64_t threads = grid * kBlockSize;
    const int64_t per_trip = threads * kUnroll;
    const int64_t trips = (n - 1) / per_trip + 1;
    const uint64_t base_offset = offset_;
    offset_ += static_cast<uint64_t>(trips) * kUnroll;  // already a multiple of 4, as torch requires

    float* data = out.data();
    for (int64_t idx = 0; idx < threads; ++idx) {
        CurandPhilox state(seed_, static_cast<uint64_t>(idx), base_offset);
        for (int64_t trip = 0; trip < trips; ++trip) {
            const int64_t first = idx + trip * per_trip;
            if (first >= n) break;  // later trips of this thread only cover larger indices
            const Philox4 r = state.next4();
            float normal[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            curand_box_muller(r[0], r[1], &normal[0], &normal[1]);
            if (first + 2 * threads < n) curand_box_muller(r[2], r[3], &normal[2], &normal[3]);
            for (int k = 0; k < kUnroll; ++k) {
                const int64_t li = first + k * threads;
                if (li < n) data[li] = normal[k] * 1.0f + 0.0f;  // transformation::normal(x, mean 0, std 1)
            }
        }
    }
    return out;
}

}  // namespace kiln
