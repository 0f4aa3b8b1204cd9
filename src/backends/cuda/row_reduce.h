// Row statistics of a float matrix, one block per row, as a LayerNorm or GroupNorm kernel computes them:
// block_reduce.cuh put to work, so that its tests (tests/cuda/block_reduce_cuda_test.cpp) run it at every
// block size on an NVIDIA GPU, and the HIP compile check (scripts/hip-compile-check.sh) builds it for
// wave64 and wave32 AMD targets.
#pragma once
#include "backends/cuda/gpu_runtime.h"

namespace kiln::cuda::detail {

// For each row r < rows of the row-major [rows, cols] x: sums[r] = x[r][0] + ... + x[r][cols-1],
// maxes[r] = their fmaxf, and sq_devs[r] = the sum of (x[r][c] - mean)^2 with mean = sums[r] / cols in
// float (the two-pass variance, times cols). All pointers on the device. Enqueues on `stream` and
// returns. threads: the block size, a multiple of the device's warp size, at most 1024. rows = 0 is a
// no-op; cols = 0 gives sum 0, max -inf, sq_dev 0. Throws kiln::Error (InvalidArgument for bad sizes or
// block size, or the runtime's failure).
void row_stats_f32(const float* x, int rows, int cols, int threads, float* sums, float* maxes, float* sq_devs,
                   cudaStream_t stream);

}  // namespace kiln::cuda::detail
