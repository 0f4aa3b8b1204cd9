// Attention through cuDNN's fused SDPA operation (graph API, cuDNN 9.13 and later): the same arithmetic as
// kiln's flash kernel (attention.h), fp16 in and out, float32 scores and statistics. On the H200 cuDNN's Hopper
// kernels ran SD 1.5's 4096-token self-attention at D = 40 in 0.150 ms against the flash kernel's 0.2125
// (docs/CUDA.md, "Attention kernel"), so the backend times both on a shape's first call and keeps the faster
// (cuda_device_ops.cpp). Built where CMake finds cuDNN (KILN_HAS_CUDNN); elsewhere constructing one throws
// Unsupported.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <tuple>

#include "backends/cuda/gpu_runtime.h"

namespace kiln::cuda {

// q [b, lq, heads * d] and k, v [b, lk, heads * d] with heads interleaved in the last dim, tokens q_stride and
// kv_stride elements apart (more than heads * d where the projections sit side by side in one tensor); the
// output is [b, lq, heads * d], dense.
struct CudnnAttentionShape {
    int64_t b, lq, lk, heads, d, q_stride, kv_stride;
    bool operator<(const CudnnAttentionShape& o) const {  // a key of the plan and route caches
        return std::tie(b, lq, lk, heads, d, q_stride, kv_stride) <
               std::tie(o.b, o.lq, o.lk, o.heads, o.d, o.q_stride, o.kv_stride);
    }
};

class CudnnAttention {
public:
    CudnnAttention();
    ~CudnnAttention();
    CudnnAttention(const CudnnAttention&) = delete;
    CudnnAttention& operator=(const CudnnAttention&) = delete;

    // Queues out = softmax(q k^T / sqrt(d)) v per (batch, head) on `stream` and returns true; returns false,
    // queuing nothing, where cuDNN has no engine for the shape (its version, a head dim or stride it does not
    // take, a pointer not 16-byte aligned) or where the shape is new while the stream is being captured (the
    // engine is chosen by timing, which waits for the GPU). workspace(bytes) returns device scratch alive until
    // the queued work is done. Errors other than a missing engine (out of memory, a failed launch) throw.
    bool run(const CudnnAttentionShape& s, const void* q, const void* k, const void* v, void* out,
             cudaStream_t stream, const std::function<void*(size_t)>& workspace);

    // Whether run() can take these pointers and strides at all (16-byte aligned, head dim and token strides
    // multiples of 8): refusals that depend on the call, not on the shape, so callers do not remember them.
    static bool takes(const CudnnAttentionShape& s, const void* q, const void* k, const void* v, const void* out);

    // Whether the fused operation exists here: kiln's cuDNN headers and the loaded library both 9.13 or later.
    static bool available();

    // Why the last shape without an engine has none (cuDNN's message), for logs and tests.
    std::string last_refusal() const;

    // The cuDNN library's version (cudnnGetVersion: 91300 for 9.13.0).
    static int64_t version();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::cuda
