// Block-wide float sum and max, for kernels that reduce a row or a group inside one block (GroupNorm,
// LayerNorm, softmax). Correct for any warp size, so the same source serves NVIDIA (32 lanes), AMD RDNA
// (gfx10/gfx11, wave32) and AMD GCN/CDNA (gfx8/gfx9, wave64): nothing below assumes 32.
//
// Contract:
//  - Every thread of the block calls it, from uniform control flow (it contains __syncthreads()).
//  - The block is one-dimensional: blockDim.x is a multiple of warpSize and at most 1024; blockDim.y and
//    blockDim.z are 1. Threads with no data pass the identity (0 for the sum, -INFINITY for the max).
//  - Every thread gets the block's result.
//  - Calls may follow one another in a kernel (sum, then max, then sum ...): each call synchronises
//    before it reuses its shared scratch (32 floats, shared by every sum call of a kernel; the max has
//    its own).
//  - The max follows fmaxf: a NaN loses to any number. The sum's order is fixed by blockDim.x and the warp
//    size, so results repeat run to run on one device but may differ in the last bits between wave32 and
//    wave64.
#pragma once
#include <math.h>

#include "backends/cuda/gpu_runtime.h"

namespace kiln::cuda {

namespace block_reduce_detail {

// The lane `lane ^ lane_mask` of the same warp. All lanes take part (see the contract).
__device__ __forceinline__ float shuffle_xor(float v, int lane_mask) {
#if defined(KILN_HIP)
    return __shfl_xor(v, lane_mask);  // the whole wavefront; ROCm before 6.2 has no *_sync shuffles
#else
    return __shfl_xor_sync(0xffffffffu, v, lane_mask);  // an NVIDIA warp is 32 lanes: the full mask
#endif
}

struct Sum {
    static constexpr float identity = 0.0f;
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct Max {
    static constexpr float identity = -INFINITY;
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Butterfly over the warp: after log2(warpSize) steps every lane holds the warp's result. warpSize is read
// at run time (it is not a constant in newer ROCm), so one loop serves 32 and 64.
template <class Op>
__device__ __forceinline__ float warp_reduce(float v, Op op) {
    for (int offset = warpSize / 2; offset > 0; offset /= 2) v = op(v, shuffle_xor(v, offset));
    return v;
}

template <class Op>
__device__ __forceinline__ float block_reduce(float v, Op op) {
    __shared__ float partial[32];  // one per warp: 1024 threads are at most 32 warps of 32 (16 of 64)
    const int lane = threadIdx.x % warpSize;
    const int warp = threadIdx.x / warpSize;
    const int warps = blockDim.x / warpSize;
    v = warp_reduce(v, op);
    __syncthreads();  // a previous call's readers are done with partial[]
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    // Every warp folds the per-warp results itself (warps <= 32 <= warpSize lanes), so every thread
    // ends with the result without another barrier.
    return warp_reduce(lane < warps ? partial[lane] : Op::identity, op);
}

}  // namespace block_reduce_detail

__device__ __forceinline__ float block_reduce_sum(float v) {
    return block_reduce_detail::block_reduce(v, block_reduce_detail::Sum{});
}

__device__ __forceinline__ float block_reduce_max(float v) {
    return block_reduce_detail::block_reduce(v, block_reduce_detail::Max{});
}

// A thread's own sum of f(B) .. f(B + N - 1), as a balanced tree: ceil(log2 N) roundings per term rather than
// N - 1. The indices are compile-time, so values f reads from a local array stay in registers.
template <int B, int N, class F>
__device__ __forceinline__ float pairwise_sum(const F& f) {
    if constexpr (N == 1) {
        return f(B);
    } else {
        return pairwise_sum<B, (N + 1) / 2>(f) + pairwise_sum<B + (N + 1) / 2, N / 2>(f);
    }
}

// The float sum over one warp, on every lane: all lanes of the warp call it (no barrier, so warps of a block
// may call it independently). Its order is fixed by the warp size.
__device__ __forceinline__ float warp_sum(float v) {
    return block_reduce_detail::warp_reduce(v, block_reduce_detail::Sum{});
}

// Shorter names the norm kernels use.
__device__ __forceinline__ float block_sum(float v) { return block_reduce_sum(v); }
__device__ __forceinline__ float block_max(float v) { return block_reduce_max(v); }

}  // namespace kiln::cuda
