#include "backends/cuda/causal_mask.h"

#include <cmath>

#include "backends/cuda/cuda_check.h"

namespace kiln::cuda {

namespace {

__global__ void causal_mask_kernel(float* scores, int64_t total, int64_t rows, int64_t cols, int64_t first_row) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t col = i % cols, row = (i / cols) % rows;
        if (col > first_row + row) scores[i] = -INFINITY;
    }
}

}  // namespace

void causal_mask(float* scores, int64_t count, int64_t rows, int64_t cols, int64_t first_row, cudaStream_t stream) {
    const int64_t total = count * rows * cols;
    if (total == 0) return;
    const int64_t blocks = std::min<int64_t>((total + 255) / 256, 65535);
    causal_mask_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(scores, total, rows, cols, first_row);
    KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kiln::cuda
