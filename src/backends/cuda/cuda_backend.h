// The CUDA backend: one per GPU, made by the registry (core/backend.h) on first use. Everything it does
// is ordered on one stream: copies, kernels and cuBLASLt products; memory comes from a caching allocator
// (cuda_allocator.h), so a steady-state step calls no cudaMalloc; recorded calls become CUDA graphs.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cuda/arch_paths.h"
#include "backends/cuda/cuda_allocator.h"
#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/cudnn_attention.h"
#include "backends/cuda/cudnn_graph_conv.h"
#include "backends/cuda/dequantize_ahead.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/gpu_runtime.h"
#include "backends/cuda/gpu_timeline.h"
#include "backends/cuda/pinned_staging.h"
#include "core/backend.h"
#include "ops/op_list.h"
#include "ops/recording_device.h"

namespace kiln::ops {
class CallRecorder;
}  // namespace kiln::ops

namespace kiln::cuda {

// Its recorded calls are CUDA graphs: CallRecorder (ops/call_recorder.h) keeps them, this backend captures,
// launches and destroys them (RecordingDevice).
class CudaBackend final : public Backend, private ops::RecordingDevice {
public:
    explicit CudaBackend(int index);  // Unsupported when the device is not there
    ~CudaBackend() override;

    Device device() const override { return {DeviceKind::Cuda, index_}; }
    DeviceDescription describe() const override;
    DeviceMemoryInfo memory_info() const override;
    int64_t reserved_bytes() const override { return allocator_.reserved_bytes(); }
    bool set_memory_limit(int64_t bytes) override {
        allocator_.set_limit(bytes);
        return true;
    }
    int64_t memory_limit() const override { return allocator_.limit(); }  // the --vram cap; 0: none
    AllocatorCounts allocator_counts() const override { return allocator_.counts(); }
    void release_cached_memory() override { allocator_.release_cached(); }
    void* allocate(int64_t bytes) override;
    void deallocate(void* p) noexcept override;
    void upload(void* dst, const void* src, int64_t bytes) override;
    void download(void* dst, const void* src, int64_t bytes) override;
    // 16-bit values widened on the GPU, then moved as float32: the host's widening of a 512x512 image took
    // longer than the transfer.
    void download_f32(float* dst, const void* src, DType src_type, int64_t n) override;
    void copy(void* dst, const void* src, int64_t bytes) override;
    void copy_strided(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t bytes,
                      int64_t count) override;
    void convert(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) override;
    void synchronize() override;
    const ops::DeviceOps& ops() const override { return *ops_; }
    // bfloat16 products need the tensor cores of compute capability 8.0 (Ampere) or later (arch_paths.h, which
    // KILN_CUDA_ARCH lowers); HIP builds keep to F32 and F16 until an AMD GPU has run them.
    // Block formats (Q8_0 ... Q6_K) are kept as blocks and dequantized beside each product (dequantize.cu).
    bool supports(DType t) const override {
#if defined(KILN_HIP)
        return t != DType::BF16;
#else
        return t != DType::BF16 || arch_.bf16;
#endif
    }
    void forget_recordings(const std::string& key_prefix) override;
    void* allocate_host(int64_t bytes) override;  // page-locked (cudaHostAlloc); null where the host refuses
    void deallocate_host(void* p) noexcept override;
    void upload_async(void* dst, const void* src, int64_t bytes) override;
    // On a copy stream that first waits for the work queued so far (the memory may have been freed by it), so
    // that a streamed block's weights come while the block before computes; KILN_CUDA_UPLOAD_AHEAD=0 copies on
    // the stream instead (for comparisons).
    void upload_ahead(void* dst, const void* src, int64_t bytes) override;
    void wait_for_uploads_ahead() override;
    Tensor run_recorded(const std::string& key, const std::vector<const Tensor*>& inputs,
                        const RecordedFn& fn) override;

    // Convolution filters kept as [cout, k, k, cin] in their own storage (cuda_device_ops.cpp rearranges a
    // weight there on its first use by the NHWC route, so that no call transposes it again and no second copy
    // is held). The storage then no longer matches the tensor's [cout, cin, k, k]: download, copy and convert
    // undo or carry the mark, so to_host() and copies still see PyTorch's layout, and freeing the storage
    // forgets it.
    struct ChannelsLastFilter {
        int64_t cout, cin, taps;
        DType type;
    };
    void mark_channels_last(const void* storage, ChannelsLastFilter f) { channels_last_[storage] = f; }
    void forget_channels_last(const void* storage) { channels_last_.erase(storage); }
    const ChannelsLastFilter* channels_last(const void* storage) const {
        auto it = channels_last_.find(storage);
        return it == channels_last_.end() ? nullptr : &it->second;
    }

    cudaStream_t stream() const { return stream_; }
    // Block-format weights dequantized on a side stream ahead of their products (dequantize_ahead.h); null
    // with KILN_CUDA_DEQUANT_AHEAD=0, where each is dequantized on the stream right before its product.
    DequantizeAhead* dequantize_ahead() const { return dequantize_ahead_.get(); }
    // Device memory from the ordinary pool even while a call is being recorded, for buffers that outlive
    // recordings (the recording's pool goes with it).
    std::shared_ptr<DeviceBuffer> lasting_buffer(int64_t bytes);
    Gemm& gemm() const { return *gemm_; }
    // The convolution routes besides im2col + cuBLASLt, each null where kiln was built without cuDNN or
    // KILN_CUDA_CONV leaves it out: cuDNN's legacy API on NCHW, and its graph API on channels-last copies.
    CudnnConv* cudnn() const { return cudnn_.get(); }
    CudnnGraphConv* cudnn_nhwc() const { return cudnn_nhwc_.get(); }
    // cuDNN's fused attention, null where kiln was built without cuDNN or KILN_CUDA_ATTENTION=kiln. With
    // KILN_CUDA_ATTENTION unset each attention shape times it against the flash kernel on its first call and
    // keeps the faster; =cudnn takes it wherever it has an engine (the flash kernel elsewhere).
    CudnnAttention* cudnn_attention() const { return cudnn_attention_.get(); }
    bool attention_measured() const { return attention_measured_; }
    // The direct kernel for convolutions with 1 to 4 output channels (conv_few_outputs.cu): unless
    // KILN_CUDA_CONV names another route.
    bool conv_few_outputs() const { return conv_few_outputs_; }
    // KILN_CUDA_CONV unset: each convolution shape times the routes there are on its first call and keeps the
    // fastest; set to one route (im2col, cudnn, nhwc, few), that route wherever it has a kernel, im2col elsewhere.
    bool conv_measured() const { return conv_measured_; }
    // KILN_CUDA_CONV_LOG=1 prints each convolution and attention shape's route timings and choice to stderr.
    bool conv_log() const { return conv_log_; }
    int multiprocessors() const { return multiprocessors_; }
    // The paths this device takes, by its compute capability or KILN_CUDA_ARCH's (arch_paths.h).
    const ArchPaths& arch() const { return arch_; }
    // KILN_CUDA_GRAPHS=0 turns recording off (every call eager), for comparisons.
    bool graphs_enabled() const { return graphs_enabled_; }
    // KILN_CUDA_SYNC_OPS=1: wait for the GPU after every op, so that the host's op spans are GPU time too.
    bool sync_ops() const { return sync_ops_; }
    // Events around each op while a profiler wants GPU spans (gpu_timeline.h).
    GpuTimeline& timeline() const { return *timeline_; }
    // Float32 products on TF32 tensor cores (10-bit mantissa, float32 range), as PyTorch's convolutions do
    // by default: for the float32 VAE of an fp16 run; off when the user asked for --precision fp32, and below
    // compute capability 8.0, which has no TF32 (cuDNN would round float32 to fp16 there).
    void set_fast_float32(bool on) override { fast_f32_ = on && arch_.tf32; }
    bool fast_float32() const { return fast_f32_; }

private:
    // ops::RecordingDevice: stream capture into a graph (a profiler's op events become event-record nodes of
    // it), launched on the stream; recording is off with KILN_CUDA_GRAPHS=0 or KILN_CUDA_SYNC_OPS=1.
    bool recording_enabled() const override { return graphs_enabled_; }
    int new_pool() override { return allocator_.new_pool(); }
    void use_pool(int pool) override { allocator_.set_current_pool(pool); }
    void release_pool(int pool) noexcept override { allocator_.release_pool(pool); }
    void begin_recording() override;
    std::unique_ptr<ops::RecordedWork> end_recording() override;
    void abort_recording() noexcept override;
    void wait_idle() override;

    int index_;
    int multiprocessors_ = 0;
    ArchPaths arch_;
    bool graphs_enabled_ = true;
    bool sync_ops_ = false;
    bool fast_f32_ = false;
    bool conv_measured_ = true;
    bool conv_few_outputs_ = true;
    bool conv_log_ = false;
    bool attention_measured_ = true;
    cudaStream_t stream_ = nullptr;
    mutable CudaAllocator allocator_;
    PinnedStaging staging_;
    std::unique_ptr<Gemm> gemm_;
    std::unique_ptr<CudnnConv> cudnn_;
    std::unique_ptr<CudnnGraphConv> cudnn_nhwc_;
    std::unique_ptr<CudnnAttention> cudnn_attention_;
    std::unique_ptr<ops::DeviceOps> ops_;
    std::unique_ptr<GpuTimeline> timeline_;
    std::unique_ptr<DequantizeAhead> dequantize_ahead_;
    bool upload_ahead_wanted_ = true;
    cudaStream_t copy_stream_ = nullptr;  // made on the first upload_ahead
    cudaEvent_t copy_after_ = nullptr, copied_ = nullptr;
    bool copies_pending_ = false;
    std::unique_ptr<ops::CallRecorder> recorder_;  // after allocator_: its tensors go back there
    void carry_layout(const void* src, void* dst, const DType* type);
    std::unordered_map<const void*, ChannelsLastFilter> channels_last_;
};

// The registry's factory for CUDA devices (list and create).
BackendFactory cuda_backend_factory();

}  // namespace kiln::cuda
