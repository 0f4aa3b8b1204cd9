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

}  // namespace

void softmax_lastdim(const void* x, void* out, DType type, int64_t rows, int64_t cols, cudaStream_t stream) {
    const int64_t count = detail::checked_count("softmax_lastdim", {rows, cols});
    detail::dispatch("softmax_lastdim", type, [](auto) {});
    if (count == 0) return;
    detail::check_pointer("softmax_lastdim", "x", x);
    detail::check_pointer("softmax_lastdim", "out", out);
    detail::dispatch("softmax_lastdim", type, [&](auto t) {
        using T = typename decltype(t)::type;
        softmax_kernel<T, T><<<detail::blocks_for(rows, 1), detail::threads_for(cols, 256), 0, stream>>>(
            static_cast<const T*>(x), static_cast<T*>(out), rows, cols);
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
        softmax_kernel<float, T><<<detail::blocks_for(rows, 1), detail::threads_for(cols, 256), 0, stream>>>(
            x, static_cast<T*>(out), rows, cols);
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kiln::cuda
