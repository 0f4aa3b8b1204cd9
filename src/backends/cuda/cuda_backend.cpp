#include "backends/cuda/cuda_backend.h"

#include <cstdlib>
#include <cstring>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_device_ops.h"
#include "backends/cuda/dependent_launch.h"
#include "backends/cuda/device_info.h"
#include "backends/cuda/graph_memset_nodes.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/on_off_setting.h"
#include "core/tensor.h"
#include "kiln/error.h"
#include "ops/call_recorder.h"

namespace kiln::cuda {

namespace {

// Makes the backend's device current for the calls in its scope (the process may hold several GPUs).
class DeviceScope {
public:
    explicit DeviceScope(int index) {
        if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
        if (previous_ != index) KILN_CUDA_CHECK(cudaSetDevice(index));
    }
    ~DeviceScope() {
        int now = -1;
        if (previous_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
    }

private:
    int previous_ = -1;
};

// A GPU as `kiln info --devices` and the backend describe it.
DeviceDescription description_of(const DeviceInfo& d) {
    const int real = d.cc_major * 10 + d.cc_minor;
    const char* forced = std::getenv("KILN_CUDA_ARCH");
    std::string as;  // the override, where it parses (a bad one is the backend's error, not the listing's)
    try {
        if (const int cc = chosen_capability(real, forced); cc != real) as = " (paths of " + capability_name(cc) + ": KILN_CUDA_ARCH)";
    } catch (const Error&) {
    }
    return {Device{DeviceKind::Cuda, d.index}, d.name,
            "compute capability " + capability_name(real) + as + ", " +
                std::to_string(d.multiprocessors) + " multiprocessors",
            {int64_t(d.free_bytes), int64_t(d.total_bytes)}};
}

}  // namespace

CudaBackend::CudaBackend(int index)
    : index_(index),
      allocator_(index),
      recorder_(std::make_unique<ops::CallRecorder>(static_cast<ops::RecordingDevice&>(*this),
                                                    ops::max_recordings_from_env(std::getenv("KILN_RECORDINGS_MAX")))) {
    std::string why;
    const std::vector<DeviceInfo> devices = cuda_devices(&why);
    bool found = false;
    for (const DeviceInfo& d : devices)
        if (d.index == index) {
            found = true;
            multiprocessors_ = d.multiprocessors;
        }
    require(found, ErrorKind::Unsupported,
            "cuda:" + std::to_string(index) + " is not available" + (why.empty() ? std::string() : " (" + why + ")"));
    arch_ = device_arch_paths(index);  // Unsupported below 7.5; a bad KILN_CUDA_ARCH is an error here
    KILN_CUDA_CHECK(cudaSetDevice(index));
    KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    timeline_ = std::make_unique<GpuTimeline>(stream_, device_name(device()));
    gemm_ = std::make_unique<Gemm>();
    const std::string conv = std::getenv("KILN_CUDA_CONV") ? std::getenv("KILN_CUDA_CONV") : "";
    require(conv.empty() || conv == "measured" || conv == "im2col" || conv == "cudnn" || conv == "nhwc" ||
                conv == "few",
            ErrorKind::InvalidArgument,
            "KILN_CUDA_CONV=" + conv + ": the convolution route is one of measured, im2col, cudnn, nhwc, few");
    const std::string attention = std::getenv("KILN_CUDA_ATTENTION") ? std::getenv("KILN_CUDA_ATTENTION") : "";
    require(attention.empty() || attention == "measured" || attention == "kiln" || attention == "cudnn",
            ErrorKind::InvalidArgument,
            "KILN_CUDA_ATTENTION=" + attention + ": the attention route is one of measured, kiln, cudnn");
    attention_measured_ = attention.empty() || attention == "measured";
    detail::dependent_launch_wanted(std::getenv("KILN_CUDA_PDL"));  // a bad value is an error here, not at a launch
    conv_measured_ = conv.empty() || conv == "measured";
    conv_few_outputs_ = conv_measured_ || conv == "few";
    const char* conv_log = std::getenv("KILN_CUDA_CONV_LOG");
    conv_log_ = conv_log && std::strcmp(conv_log, "1") == 0;
#if KILN_HAS_CUDNN
    if (conv_measured_ || conv == "cudnn") cudnn_ = std::make_unique<CudnnConv>();
    if (conv_measured_ || conv == "nhwc") cudnn_nhwc_ = std::make_unique<CudnnGraphConv>();
    if (attention != "kiln" && arch_.cudnn_attention) cudnn_attention_ = std::make_unique<CudnnAttention>();
#endif
    ops_ = std::make_unique<CudaDeviceOps>(*this);
    const char* env = std::getenv("KILN_CUDA_GRAPHS");
    const char* sync = std::getenv("KILN_CUDA_SYNC_OPS");
    sync_ops_ = sync && std::strcmp(sync, "1") == 0;
    graphs_enabled_ = !(env && std::strcmp(env, "0") == 0) && !sync_ops_;
    upload_ahead_wanted_ = detail::on_off_setting("KILN_CUDA_UPLOAD_AHEAD", std::getenv("KILN_CUDA_UPLOAD_AHEAD"),
                                                  "copies streamed weights ahead", "in line");
    allocator_.set_split_policy(split_policy_setting("KILN_CUDA_SPLIT_BLOCKS", std::getenv("KILN_CUDA_SPLIT_BLOCKS"),
                                                    SplitPolicy::WhileUncapped));
    if (dequantize_ahead_wanted(std::getenv("KILN_CUDA_DEQUANT_AHEAD")))
        dequantize_ahead_ = std::make_unique<DequantizeAhead>(*this);
}

CudaBackend::~CudaBackend() {
    cudaStreamSynchronize(stream_);
    recorder_->clear();
    dequantize_ahead_.reset();
    if (copy_stream_) {
        cudaStreamSynchronize(copy_stream_);
        cudaEventDestroy(copy_after_);
        cudaEventDestroy(copied_);
        cudaStreamDestroy(copy_stream_);
    }
    timeline_.reset();
    ops_.reset();
    cudnn_.reset();
    cudnn_nhwc_.reset();
    cudnn_attention_.reset();
    gemm_.reset();
    if (stream_) cudaStreamDestroy(stream_);
}

DeviceDescription CudaBackend::describe() const {
    std::string why;
    for (const DeviceInfo& d : cuda_devices(&why))
        if (d.index == index_)
            return description_of(d);
    return {device(), "?", why, {}};
}

DeviceMemoryInfo CudaBackend::memory_info() const {
    DeviceScope scope(index_);
    size_t free_b = 0, total_b = 0;
    KILN_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return {int64_t(free_b), int64_t(total_b)};
}

std::shared_ptr<DeviceBuffer> CudaBackend::lasting_buffer(int64_t bytes) {
    const int pool = allocator_.current_pool();
    allocator_.set_current_pool(0);
    try {
        auto buffer = std::make_shared<DeviceBuffer>(*this, bytes);
        allocator_.set_current_pool(pool);
        return buffer;
    } catch (...) {
        allocator_.set_current_pool(pool);
        throw;
    }
}

void* CudaBackend::allocate(int64_t bytes) {
    DeviceScope scope(index_);
    return allocator_.allocate(bytes);
}

void CudaBackend::upload(void* dst, const void* src, int64_t bytes) {
    if (!channels_last_.empty()) channels_last_.erase(dst);  // new values, in the tensor's own layout
    if (dequantize_ahead_) dequantize_ahead_->restart();  // a weight's blocks may arrive: read them after
    DeviceScope scope(index_);  // the staging's event belongs to this device
    staging_.upload(dst, src, bytes, stream_);  // src (the caller's) may go; the copy itself may still run
}

void* CudaBackend::allocate_host(int64_t bytes) {
    DeviceScope scope(index_);
    void* p = nullptr;
    if (cudaHostAlloc(&p, size_t(bytes), cudaHostAllocDefault) != cudaSuccess) {
        (void)cudaGetLastError();  // the host may cap page-locked memory: the caller falls back to ordinary memory
        return nullptr;
    }
    return p;
}

void CudaBackend::deallocate_host(void* p) noexcept {
    if (p) (void)cudaFreeHost(p);
}

void CudaBackend::upload_async(void* dst, const void* src, int64_t bytes) {
    if (!channels_last_.empty()) channels_last_.erase(dst);  // new values, in the tensor's own layout
    if (dequantize_ahead_) dequantize_ahead_->restart();
    DeviceScope scope(index_);
    if (bytes > 0) KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::upload_ahead(void* dst, const void* src, int64_t bytes) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    KILN_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capture));
    // (A recorded call copies in line: a copy stream left unjoined would fail the capture.)
    if (!upload_ahead_wanted_ || capture != cudaStreamCaptureStatusNone) return upload_async(dst, src, bytes);
    if (!channels_last_.empty()) channels_last_.erase(dst);
    if (dequantize_ahead_) dequantize_ahead_->restart();
    DeviceScope scope(index_);
    if (!copy_stream_) {
        KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
        KILN_CUDA_CHECK(cudaEventCreateWithFlags(&copy_after_, cudaEventDisableTiming));
        KILN_CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
    }
    // dst comes from the caching allocator, whose blocks are reused in the stream's order: the copy waits for
    // the work queued so far, which may still read what dst held.
    KILN_CUDA_CHECK(cudaEventRecord(copy_after_, stream_));
    KILN_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, copy_after_, 0));
    if (bytes > 0)
        KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyHostToDevice, copy_stream_));
    KILN_CUDA_CHECK(cudaEventRecord(copied_, copy_stream_));  // the copy stream is in order: covers the earlier
    copies_pending_ = true;
}

void CudaBackend::wait_for_uploads_ahead() {
    if (!copies_pending_) return;
    KILN_CUDA_CHECK(cudaStreamWaitEvent(stream_, copied_, 0));
    copies_pending_ = false;
}

void CudaBackend::deallocate(void* p) noexcept {
    if (!channels_last_.empty()) channels_last_.erase(p);
    allocator_.deallocate(p);
}

void CudaBackend::download(void* dst, const void* src, int64_t bytes) {
    Tensor restored;  // a channels-last filter, back in [cout, cin, k, k] for the host
    if (const ChannelsLastFilter* f = channels_last(src)) {
        restored = Tensor::empty_on(*this, {f->cout, f->cin, f->taps}, f->type);
        // [cout][taps][cin] -> [cout][cin][taps] is the same rearrangement with cin and taps exchanged.
        filter_to_krsc(src, restored.device_data(), f->type, f->cout, f->taps, f->cin, stream_);
        src = restored.device_data();
    }
    DeviceScope scope(index_);
    staging_.download(dst, src, bytes, stream_);
    timeline_->synchronized();  // the GPU spans of the ops before it can be read now, without another wait
}

void CudaBackend::download_f32(float* dst, const void* src, DType src_type, int64_t n) {
    // A channels-last filter is restored by download, in its own type.
    if (src_type == DType::F32 || n == 0 || channels_last(src)) return Backend::download_f32(dst, src, src_type, n);
    Tensor wide = Tensor::empty_on(*this, {n}, DType::F32);
    cuda::convert(src, src_type, wide.device_data(), DType::F32, n, stream_);
    download(dst, wide.device_data(), n * 4);
}

void CudaBackend::copy(void* dst, const void* src, int64_t bytes) {
    if (dequantize_ahead_) dequantize_ahead_->restart();
    if (bytes > 0) KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDeviceToDevice, stream_));
    carry_layout(src, dst, nullptr);
}

void CudaBackend::copy_strided(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t bytes,
                               int64_t count) {
    if (bytes <= 0 || count <= 0) return;
    if (!channels_last_.empty()) channels_last_.erase(dst);  // activations: values in their own layout
    if (dequantize_ahead_) dequantize_ahead_->restart();
    KILN_CUDA_CHECK(cudaMemcpy2DAsync(dst, size_t(dst_pitch), src, size_t(src_pitch), size_t(bytes), size_t(count),
                                      cudaMemcpyDeviceToDevice, stream_));
}

// dst now holds src's values, in src's layout: a channels-last filter's mark goes with them (with the new type
// where given), and a mark dst had goes.
void CudaBackend::carry_layout(const void* src, void* dst, const DType* type) {
    if (channels_last_.empty()) return;
    if (const ChannelsLastFilter* f = channels_last(src)) {
        ChannelsLastFilter g = *f;
        if (type) g.type = *type;
        mark_channels_last(dst, g);
    } else {
        channels_last_.erase(dst);
    }
}

void CudaBackend::convert(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) {
    if (dequantize_ahead_) dequantize_ahead_->restart();
    if (src_type == dst_type) return copy(dst, src, dtype_storage_bytes(src_type, n));
    cuda::convert(src, src_type, dst, dst_type, n, stream_);
    carry_layout(src, dst, &dst_type);  // value by value: the layout stays
}

void CudaBackend::synchronize() {
    KILN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    timeline_->synchronized();
}

namespace {

// A recorded call's graph, launched on the stream; a profiler's op events recorded at capture (spans) are read
// back after each launch.
class RecordedGraph final : public ops::RecordedWork {
public:
    RecordedGraph(cudaStream_t stream, GpuTimeline& timeline, std::shared_ptr<GpuTimeline::GraphSpans> spans)
        : stream_(stream), timeline_(timeline), spans_(std::move(spans)) {}
    ~RecordedGraph() override {
        if (exec) cudaGraphExecDestroy(exec);
    }
    void replay() override {
        timeline_.before_replay(spans_);  // each launch records the graph's op events again
        KILN_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
    }
    cudaGraphExec_t exec = nullptr;

private:
    cudaStream_t stream_;
    GpuTimeline& timeline_;
    std::shared_ptr<GpuTimeline::GraphSpans> spans_;
};

}  // namespace

Tensor CudaBackend::run_recorded(const std::string& key, const std::vector<const Tensor*>& inputs,
                                 const RecordedFn& fn) {
    // The first call runs eagerly: it loads kernels and picks cuBLASLt algorithms, which capture cannot do.
    return recorder_->run(key, inputs, fn);
}

void CudaBackend::forget_recordings(const std::string& key_prefix) { recorder_->forget(key_prefix); }

void CudaBackend::begin_recording() {
    KILN_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
    try {
        timeline_->begin_capture();  // a profiler's op events become event-record nodes of the graph
    } catch (...) {
        abort_recording();
        throw;
    }
}

void CudaBackend::abort_recording() noexcept {
    timeline_->abort_capture();
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream_, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
}

std::unique_ptr<ops::RecordedWork> CudaBackend::end_recording() {
    std::unique_ptr<RecordedGraph> work;
    try {
        work = std::make_unique<RecordedGraph>(stream_, *timeline_, timeline_->end_capture());
    } catch (...) {
        abort_recording();
        throw;
    }
    cudaGraph_t graph = nullptr;
    KILN_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    try {
        memset_nodes_to_kernels(graph);  // a library's memsets, each a slow node of its own
        KILN_CUDA_CHECK(cudaGraphInstantiate(&work->exec, graph, 0));
    } catch (...) {
        cudaGraphDestroy(graph);
        throw;
    }
    cudaGraphDestroy(graph);
    return work;
}

void CudaBackend::wait_idle() { KILN_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

BackendFactory cuda_backend_factory() {
    BackendFactory f;
    f.list = [](std::string* why) {
        std::vector<DeviceDescription> out;
        for (const DeviceInfo& d : cuda_devices(why))
            out.push_back(description_of(d));
        if (why && !why->empty()) *why = "cuda: " + *why;
        return out;
    };
    f.create = [](int index) -> std::unique_ptr<Backend> { return std::make_unique<CudaBackend>(index); };
    return f;
}

}  // namespace kiln::cuda
