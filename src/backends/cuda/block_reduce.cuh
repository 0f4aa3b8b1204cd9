// Block-wide sum and max of one float per thread, the result returned to every thread.
// Contract: a 1-D block whose blockDim.x is a multiple of warpSize and at most 1024; every thread of the
// block calls it (it holds barriers), and it may be called again at once (it ends with a barrier).
// A shared-memory tree, not warp shuffles: it is the same code for warps of 32 and 64 lanes and needs
// none of the shuffle intrinsics, whose names and masks differ between CUDA and HIP versions. The order
// of the additions is fixed, so results repeat bit for bit; a sum's tree is ceil(log2(blockDim.x)) deep.
#pragma once
#include "backends/cuda/gpu_runtime.h"

namespace kiln::cuda {

namespace block_reduce_detail {

struct Sum {
    __device__ float operator()(float a, float b) const { return a + b; }
};
struct Max {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <class Op>
__device__ float reduce(float v, Op op) {
    __shared__ float partial[1024];
    const unsigned t = threadIdx.x;
    partial[t] = v;
    __syncthreads();
    // Fold the upper part of the live range onto the lower; an odd width keeps its middle element.
    for (unsigned width = blockDim.x; width > 1;) {
        const unsigned half = (width + 1) / 2;
        if (t + half < width) partial[t] = op(partial[t], partial[t + half]);
        __syncthreads();
        width = half;
    }
    const float result = partial[0];
    __syncthreads();  // everyone has read it before a next call overwrites it
    return result;
}

}  // namespace block_reduce_detail

__device__ inline float block_sum(float v) { return block_reduce_detail::reduce(v, block_reduce_detail::Sum{}); }
__device__ inline float block_max(float v) { return block_reduce_detail::reduce(v, block_reduce_detail::Max{}); }

}  // namespace kiln::cuda
