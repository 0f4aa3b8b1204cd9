// layer_norm over the last dim: one block per row. Mean, then the biased variance as the mean of
// (x - mean)^2 in a second pass over the row (no E[x^2] - E[x]^2 cancellation), both float block sums
// (a row of thousands gives each of up to 256 threads a few dozen values: plain sums);
// out = (x - mean) * rstd * gamma + beta, rounded once on the store.
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
        // Rows of up to 2048 take 64-thread blocks: a block per row mostly waits on its two reductions, and
        // small blocks keep more rows in flight (SD's rows are 320 to 1280 wide, thousands of them).
        const int threads = detail::threads_for(cols, cols <= 2048 ? 64 : 256);
        layer_norm_kernel<T><<<detail::blocks_for(rows, 1), threads, 0, stream>>>(
            static_cast<const T*>(x), static_cast<const T*>(gamma), static_cast<const T*>(beta), static_cast<T*>(out),
            rows, cols, eps);
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kiln::cuda
