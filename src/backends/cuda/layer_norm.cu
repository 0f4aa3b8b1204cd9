// layer_norm over the last dim. Mean, then the biased variance as the mean of (x - mean)^2 in a second pass
// over the row (no E[x^2] - E[x]^2 cancellation), both float sums; out = (x - mean) * rstd * gamma + beta,
// rounded once on the store. Rows of up to 2048 values (every SD transformer's) take a warp each and stay in
// its registers: one read of the row, shuffle reductions, no block barriers. Each lane adds into two
// alternating sums, so no sum runs longer than ceil(cols / 64) terms, as in the block kernel with its 64 or
// more threads (the error bound of tests/cuda/kernel_test_support.h's sum_depth). Longer rows take a block each.
#include "backends/cuda/block_reduce.cuh"
#include "backends/cuda/kernel_common.cuh"
#include "backends/cuda/kernels.h"

namespace kiln::cuda {

namespace {

template <class T>
__global__ void layer_norm_kernel(const T* x, const T* gamma, const T* beta, T* out, int64_t rows, int64_t cols,
                                  float eps) {
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {  // uniform over the block: the barriers are safe
        const T* src = x + r * cols;
        T* dst = out + r * cols;
        // x - x[0] rather than x: the sum's rounding then scales with the row's spread, not its offset.
        const float pivot = detail::to_float(src[0]);
        float sum = 0.0f;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum += detail::to_float(src[j]) - pivot;
        const float mean = pivot + block_sum(sum) / static_cast<float>(cols);
        float sq = 0.0f;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
            const float d = detail::to_float(src[j]) - mean;
            sq += d * d;
        }
        const float var = block_sum(sq) / static_cast<float>(cols);
        const float rstd = 1.0f / sqrtf(var + eps);
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
            dst[j] = detail::from_float<T>((detail::to_float(src[j]) - mean) * rstd * detail::to_float(gamma[j]) +
                                           detail::to_float(beta[j]));
    }
}

template <class T, int kPerLane>
__global__ void layer_norm_warp_kernel(const T* x, const T* gamma, const T* beta, T* out, int64_t rows, int cols,
                                       float eps) {
    const int lane = threadIdx.x % warpSize, warps_per_block = blockDim.x / warpSize;
    const int64_t warps = int64_t(gridDim.x) * warps_per_block;
    for (int64_t r = int64_t(blockIdx.x) * warps_per_block + threadIdx.x / warpSize; r < rows; r += warps) {
        const T* src = x + r * cols;
        T* dst = out + r * cols;
        const float pivot = detail::to_float(src[0]);  // x - x[0]: the rounding scales with the row's spread
        float v[kPerLane];
        float sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) {
            const int j = lane + k * warpSize;
            v[k] = j < cols ? detail::to_float(src[j]) : 0.0f;
            if (j < cols) sum[k & 1] += v[k] - pivot;
        }
        const float mean = pivot + warp_sum(sum[0] + sum[1]) / static_cast<float>(cols);
        float sq[2] = {0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) {
            const int j = lane + k * warpSize;
            const float d = v[k] - mean;
            if (j < cols) sq[k & 1] += d * d;
        }
        const float rstd = 1.0f / sqrtf(warp_sum(sq[0] + sq[1]) / static_cast<float>(cols) + eps);
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) {
            const int j = lane + k * warpSize;
            if (j < cols)
                dst[j] = detail::from_float<T>((v[k] - mean) * rstd * detail::to_float(gamma[j]) + detail::to_float(beta[j]));
        }
    }
}

}  // namespace

void layer_norm(const void* x, const void* gamma, const void* beta, void* out, DType type, int64_t rows, int64_t cols,
                float eps, cudaStream_t stream) {
    const int64_t count = detail::checked_count("layer_norm", {rows, cols});
    detail::dispatch("layer_norm", type, [](auto) {});
    require(eps >= 0.0f, ErrorKind::InvalidArgument, "kiln::cuda::layer_norm: eps must be >= 0");
    if (count == 0) return;
    detail::check_pointer("layer_norm", "x", x);
    detail::check_pointer("layer_norm", "gamma", gamma);
    detail::check_pointer("layer_norm", "beta", beta);
    detail::check_pointer("layer_norm", "out", out);
    detail::dispatch("layer_norm", type, [&](auto t) {
        using T = typename decltype(t)::type;
        const T *xt = static_cast<const T*>(x), *g = static_cast<const T*>(gamma), *b = static_cast<const T*>(beta);
        T* o = static_cast<T*>(out);
        if (cols <= 2048) {
            // Registers for the row at 32 lanes (wave64 uses half of them); 128-thread blocks, 4 rows each.
            constexpr int kThreadsPerBlock = 128;
            const unsigned blocks = detail::blocks_for(rows, kThreadsPerBlock / 32);
            const int c = int(cols);
            if (cols <= 256)
                layer_norm_warp_kernel<T, 8><<<blocks, kThreadsPerBlock, 0, stream>>>(xt, g, b, o, rows, c, eps);
            else if (cols <= 512)
                layer_norm_warp_kernel<T, 16><<<blocks, kThreadsPerBlock, 0, stream>>>(xt, g, b, o, rows, c, eps);
            else if (cols <= 1024)
                layer_norm_warp_kernel<T, 32><<<blocks, kThreadsPerBlock, 0, stream>>>(xt, g, b, o, rows, c, eps);
            else
                layer_norm_warp_kernel<T, 64><<<blocks, kThreadsPerBlock, 0, stream>>>(xt, g, b, o, rows, c, eps);
            return;
        }
        layer_norm_kernel<T><<<detail::blocks_for(rows, 1), detail::threads_for(cols, 256), 0, stream>>>(
            xt, g, b, o, rows, cols, eps);
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kiln::cuda
