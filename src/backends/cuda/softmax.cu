// softmax over the last dim: one block per row (looping over rows beyond the grid). The row max is
// subtracted before exp, so nothing overflows; the sum of e^(x - max) is a float block sum, and each
// output is e / sum, one division, rounded once on the store. softmax_f32_rows_to reads float32 scores and
// stores the probabilities in another type: attention's products take them so, with no float32 copy between.
#include "backends/cuda/block_reduce.cuh"
#include "backends/cuda/kernel_common.cuh"
#include "backends/cuda/kernels.h"

namespace kiln::cuda {

namespace {

template <class Tin, class Tout>
__global__ void softmax_kernel(const Tin* x, Tout* out, int64_t rows, int64_t cols) {
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {  // uniform over the block: the barriers are safe
        const Tin* src = x + r * cols;
        Tout* dst = out + r * cols;
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, detail::to_float(src[j]));
        m = block_max(m);
        float sum = 0.0f;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum += expf(detail::to_float(src[j]) - m);
        sum = block_sum(sum);
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
            dst[j] = detail::from_float<Tout>(expf(detail::to_float(src[j]) - m) / sum);
    }
}

// The same for rows of at most 256 kPer values, kept in registers: one read of the row instead of three
// (the VAE's attention has rows of 4096 to 16384 float32 scores, more than the caches hold between the
// passes). Each thread takes the values j = t, t + 256, ... in the loop kernel's order, so both kernels
// round alike.
constexpr int kRowThreads = 256;

template <class Tin, class Tout, int kPer>
__global__ void __launch_bounds__(kRowThreads) softmax_row_in_registers_kernel(const Tin* x, Tout* out, int64_t rows,
                                                                               int cols) {
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {  // uniform over the block: the barriers are safe
        const Tin* src = x + r * cols;
        Tout* dst = out + r * cols;
        float v[kPer];
        float m = -INFINITY;
#pragma unroll
        for (int k = 0; k < kPer; ++k) {
            const int j = threadIdx.x + k * kRowThreads;
            v[k] = j < cols ? detail::to_float(src[j]) : -INFINITY;
            m = fmaxf(m, v[k]);
        }
        m = block_max(m);
        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < kPer; ++k) {
            if (threadIdx.x + k * kRowThreads < cols) {
                v[k] = expf(v[k] - m);
                sum += v[k];
            }
        }
        sum = block_sum(sum);
#pragma unroll
        for (int k = 0; k < kPer; ++k) {
            const int j = threadIdx.x + k * kRowThreads;
            if (j < cols) dst[j] = detail::from_float<Tout>(v[k] / sum);
        }
    }
}

// Rows of 2049 to 16384 values in registers (16, 32 or 64 a thread); the loop kernel otherwise.
template <class Tin, class Tout>
void launch_softmax(const Tin* x, Tout* out, int64_t rows, int64_t cols, cudaStream_t stream) {
    const unsigned blocks = detail::blocks_for(rows, 1);
    const int c = static_cast<int>(cols);  // used only where cols <= 16384
    if (cols <= 8 * kRowThreads || cols > 64 * kRowThreads)
        softmax_kernel<Tin, Tout><<<blocks, detail::threads_for(cols, 256), 0, stream>>>(x, out, rows, cols);
    else if (cols <= 16 * kRowThreads)
        softmax_row_in_registers_kernel<Tin, Tout, 16><<<blocks, kRowThreads, 0, stream>>>(x, out, rows, c);
    else if (cols <= 32 * kRowThreads)
        softmax_row_in_registers_kernel<Tin, Tout, 32><<<blocks, kRowThreads, 0, stream>>>(x, out, rows, c);
    else
        softmax_row_in_registers_kernel<Tin, Tout, 64><<<blocks, kRowThreads, 0, stream>>>(x, out, rows, c);
}

}  // namespace

void softmax_lastdim(const void* x, void* out, DType type, int64_t rows, int64_t cols, cudaStream_t stream) {
    const int64_t count = detail::checked_count("softmax_lastdim", {rows, cols});
    detail::dispatch("softmax_lastdim", type, [](auto) {});
    if (count == 0) return;
    detail::check_pointer("softmax_lastdim", "x", x);
    detail::check_pointer("softmax_lastdim", "out", out);
    detail::dispatch("softmax_lastdim", type, [&](auto t) {
        using T = typename decltype(t)::type;
        launch_softmax(static_cast<const T*>(x), static_cast<T*>(out), rows, cols, stream);
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

void softmax_f32_rows_to(const float* x, void* out, DType out_type, int64_t rows, int64_t cols, cudaStream_t stream) {
    const int64_t count = detail::checked_count("softmax_f32_rows_to", {rows, cols});
    detail::dispatch("softmax_f32_rows_to", out_type, [](auto) {});
    if (count == 0) return;
    detail::check_pointer("softmax_f32_rows_to", "x", x);
    detail::check_pointer("softmax_f32_rows_to", "out", out);
    detail::dispatch("softmax_f32_rows_to", out_type, [&](auto t) {
        using T = typename decltype(t)::type;
        launch_softmax(x, static_cast<T*>(out), rows, cols, stream);
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kiln::cuda
