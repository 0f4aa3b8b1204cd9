#include "backends/cuda/row_reduce.h"

#include <cstdint>
#include <string>

#include "backends/cuda/block_reduce.cuh"
#include "backends/cuda/cuda_check.h"
#include "kiln/error.h"

namespace kiln::cuda::detail {

namespace {

__global__ void row_stats_kernel(const float* x, int cols, float* sums, float* maxes, float* sq_devs) {
    const float* row = x + int64_t(blockIdx.x) * cols;
    float s = 0.0f, m = -INFINITY;  // the identities, for threads past the row's end
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        s += row[c];
        m = fmaxf(m, row[c]);
    }
    s = block_reduce_sum(s);
    // The second pass needs the sum on every thread, and calls the sum again with no barrier between: the
    // scratch reuse that the contract allows (compute-sanitizer's racecheck finds a missing barrier). The
    // max comes last so that its barriers do not hide one.
    const float mean = cols > 0 ? s / cols : 0.0f;
    float q = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float d = row[c] - mean;
        q += d * d;
    }
    q = block_reduce_sum(q);
    m = block_reduce_max(m);
    // Every thread holds the results (the contract); the last one writes them, so a result that reached
    // only thread 0 would fail the tests.
    if (threadIdx.x == blockDim.x - 1) {
        sums[blockIdx.x] = s;
        maxes[blockIdx.x] = m;
        sq_devs[blockIdx.x] = q;
    }
}

}  // namespace

void row_stats_f32(const float* x, int rows, int cols, int threads, float* sums, float* maxes, float* sq_devs,
                   cudaStream_t stream) {
    const std::string what = "row_stats_f32: rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) +
                             " threads=" + std::to_string(threads);
    require(rows >= 0 && cols >= 0, ErrorKind::InvalidArgument, what + ": negative size");
    if (rows == 0) return;
    require(sums && maxes && sq_devs && (cols == 0 || x), ErrorKind::InvalidArgument, what + ": null pointer");
    int device = 0, warp = 0;
    KILN_CUDA_CHECK(cudaGetDevice(&device));
    KILN_CUDA_CHECK(cudaDeviceGetAttribute(&warp, cudaDevAttrWarpSize, device));
    require(threads > 0 && threads <= 1024 && threads % warp == 0, ErrorKind::InvalidArgument,
            what + ": the block size must be a multiple of the warp size (" + std::to_string(warp) +
                ") and at most 1024");
    row_stats_kernel<<<rows, threads, 0, stream>>>(x, cols, sums, maxes, sq_devs);
    KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kiln::cuda::detail
