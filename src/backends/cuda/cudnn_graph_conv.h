// Convolutions through cuDNN's graph (backend) API on channels-last tensors: x [n, h, w, cin], filter
// [cout, k, k, cin], y [n, oh, ow, cout], in the storage dtype with float32 accumulation. On the H200 these
// engines run SD's 3x3 convolutions at 440-900 TFLOP/s where the legacy API's NCHW kernels reach 35-640, and
// 30 at the VAE's 1024x1024 level (docs/CUDA.md, scripts/experiments/cudnn_probe.cpp). The engine is chosen
// once per shape by timing cuDNN's first candidates (heuristic mode A) on the call's own buffers, leaving out
// those that accumulate in reduced precision, are not deterministic, or (float32 without TF32) use tensor cores.
// Built where CMake finds cuDNN (KILN_HAS_CUDNN); elsewhere constructing one throws Unsupported.
#pragma once
#include <functional>
#include <memory>

#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/gpu_runtime.h"

namespace kiln::cuda {

class CudnnGraphConv {
public:
    CudnnGraphConv();
    ~CudnnGraphConv();
    CudnnGraphConv(const CudnnGraphConv&) = delete;
    CudnnGraphConv& operator=(const CudnnGraphConv&) = delete;
    // y = conv(x, w) without bias, all three channels-last. workspace(bytes) returns device scratch for this
    // call, alive until the queued work is done. The first call of a shape synchronizes the stream (timing);
    // it must not be inside a stream capture. No engine for the shape: Unsupported.
    void run(const ConvShape& s, const void* x, const void* w, void* y, cudaStream_t stream,
             const std::function<void*(size_t)>& workspace);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::cuda
