// The CUDA backend: one per GPU, made by the registry (core/backend.h) on first use. Everything it does
// is ordered on one stream: copies, kernels and cuBLASLt products; memory comes from a caching allocator
// (cuda_allocator.h), so a steady-state step calls no cudaMalloc; recorded calls become CUDA graphs.
#pragma once
#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_allocator.h"
#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/gpu_runtime.h"
#include "backends/cuda/gpu_timeline.h"
#include "core/backend.h"
#include "ops/op_list.h"

namespace kiln::cuda {

class CudaBackend final : public Backend {
public:
    explicit CudaBackend(int index);  // Unsupported when the device is not there
    ~CudaBackend() override;

    Device device() const override { return {DeviceKind::Cuda, index_}; }
    DeviceDescription describe() const override;
    DeviceMemoryInfo memory_info() const override;
    int64_t reserved_bytes() const override { return allocator_.reserved_bytes(); }
    void* allocate(int64_t bytes) override;
    void deallocate(void* p) noexcept override { allocator_.deallocate(p); }
    void upload(void* dst, const void* src, int64_t bytes) override;
    void download(void* dst, const void* src, int64_t bytes) override;
    void copy(void* dst, const void* src, int64_t bytes) override;
    void convert(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) override;
    void synchronize() override;
    const ops::DeviceOps& ops() const override { return *ops_; }
    Tensor run_recorded(const std::string& key, const std::vector<const Tensor*>& inputs,
                        const RecordedFn& fn) override;

    cudaStream_t stream() const { return stream_; }
    Gemm& gemm() const { return *gemm_; }
    // cuDNN's convolutions, or null where kiln was built without cuDNN or KILN_CUDA_CONV=im2col.
    CudnnConv* cudnn() const { return cudnn_.get(); }
    int multiprocessors() const { return multiprocessors_; }
    // KILN_CUDA_GRAPHS=0 turns recording off (every call eager), for comparisons.
    bool graphs_enabled() const { return graphs_enabled_; }
    // KILN_CUDA_SYNC_OPS=1: wait for the GPU after every op, so that the host's op spans are GPU time too.
    bool sync_ops() const { return sync_ops_; }
    // Events around each op while a profiler wants GPU spans (gpu_timeline.h).
    GpuTimeline& timeline() const { return *timeline_; }
    // Float32 products on TF32 tensor cores (10-bit mantissa, float32 range), as PyTorch's convolutions do
    // by default: for the float32 VAE of an fp16 run; off when the user asked for --precision fp32.
    void set_fast_float32(bool on) override { fast_f32_ = on; }
    bool fast_float32() const { return fast_f32_; }

private:
    struct Recording {
        int calls = 0;
        bool failed = false;
        int pool = 0;
        std::vector<Tensor> inputs;
        std::unique_ptr<Tensor> output;
        cudaGraphExec_t exec = nullptr;
        int replays = 0;
        std::array<double, ops::kOpCount> flops{};  // per op kind, reported again at each replay
        std::shared_ptr<GpuTimeline::GraphSpans> spans;  // event-record nodes, if a profiler was there at capture
    };

    int index_;
    int multiprocessors_ = 0;
    bool graphs_enabled_ = true;
    bool sync_ops_ = false;
    bool fast_f32_ = false;
    cudaStream_t stream_ = nullptr;
    mutable CudaAllocator allocator_;
    std::unique_ptr<Gemm> gemm_;
    std::unique_ptr<CudnnConv> cudnn_;
    std::unique_ptr<ops::DeviceOps> ops_;
    std::unique_ptr<GpuTimeline> timeline_;
    std::map<std::string, Recording> recordings_;
};

// The registry's factory for CUDA devices (list and create).
BackendFactory cuda_backend_factory();

}  // namespace kiln::cuda
