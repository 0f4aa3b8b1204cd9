// For attention computed by products (cuda_device_ops.cpp): scores [count, rows, cols] float32 of query rows
// first_row.. of each head; key j is masked (-inf) for query i when j > i, as ops::attention's causal.
#pragma once
#include <cstdint>

#include "backends/cuda/gpu_runtime.h"

namespace kiln::cuda {

void causal_mask(float* scores, int64_t count, int64_t rows, int64_t cols, int64_t first_row, cudaStream_t stream);

}  // namespace kiln::cuda
