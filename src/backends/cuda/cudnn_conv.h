// Convolutions through cuDNN (built where CMake finds it: KILN_HAS_CUDNN), NCHW in the storage dtype with
// float32 accumulation, the algorithm benchmarked once per shape by cuDNN itself (cudnnFind...) and cached.
// cuda_device_ops.cpp uses it instead of im2col + product where it is compiled in, unless KILN_CUDA_CONV=im2col:
// both routes are kept so that they can be measured against each other (docs/CUDA.md).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "backends/cuda/gpu_runtime.h"
#include "core/dtype.h"

namespace kiln::cuda {

struct ConvShape {
    int64_t n, cin, h, w, cout, k, stride, padding, oh, ow;
    DType type;
    bool tf32;  // F32 with TF32 tensor cores allowed
};

class CudnnConv {
public:
    CudnnConv();
    ~CudnnConv();
    CudnnConv(const CudnnConv&) = delete;
    CudnnConv& operator=(const CudnnConv&) = delete;
    // y = conv(x, w) without bias. workspace(bytes) returns device scratch of that size for this call (the
    // caller's allocator keeps it alive until the work queued on the stream is done).
    void run(const ConvShape& s, const void* x, const void* w, void* y, cudaStream_t stream,
             const std::function<void*(size_t)>& workspace);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::cuda
