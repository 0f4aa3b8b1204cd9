// A backend is memory + a stream + kernels for one device (DESIGN decision 2). The CPU needs no object:
// host tensors hold their own storage and the ops in src/ops are its kernels. A GPU backend owns its
// device's allocations (tensors made on it hold a DeviceBuffer), orders every copy and kernel on one
// stream, and gives the ops layer its kernels (ops/device_ops.h). Model code never names a backend:
// it runs wherever its weights are.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator_counts.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/memory.h"

namespace kiln {

namespace ops {
class DeviceOps;
}
class Tensor;

struct DeviceMemoryInfo {
    int64_t free = 0, total = 0;  // bytes, as the driver reports them
};

// One line per device for `kiln info --devices`.
struct DeviceDescription {
    Device device;
    std::string name;  // "NVIDIA H200"
    std::string detail;  // compute capability, multiprocessors, ...
    DeviceMemoryInfo memory;
    // Runs on the CPU (Mesa's lavapipe): usable, tested in CI, but never what "auto" picks.
    bool emulated = false;
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual Device device() const = 0;
    virtual DeviceDescription describe() const = 0;
    virtual DeviceMemoryInfo memory_info() const = 0;
    // Bytes the backend's allocator holds from the device (live buffers plus its cache).
    // The largest single allocation the driver allows (Vulkan's maxMemoryAllocationSize); 0: no stated limit.
    virtual int64_t max_allocation_bytes() const { return 0; }
    virtual int64_t reserved_bytes() const = 0;
    // Caps the bytes the backend holds from the device, cache included (--vram): past it an allocation gives the
    // cache back, then is OutOfMemory. 0 lifts the cap. False where the backend cannot cap (then nothing changed).
    virtual bool set_memory_limit(int64_t bytes) {
        (void)bytes;
        return false;
    }
    // The cap set_memory_limit set (0: none, or a backend that cannot cap).
    virtual int64_t memory_limit() const { return 0; }
    // What the allocator asked of the driver since the backend was made (none for a backend without a cache).
    virtual AllocatorCounts allocator_counts() const { return {}; }
    // Gives memory the backend caches but does not use back to the device.
    virtual void release_cached_memory() {}

    // A shape-only pass (core/dry_run.h, through DryRun): from start_dry_run() to finish_dry_run() allocations are
    // counted and not made, and no work runs. False where the backend has none (then nothing changed).
    virtual bool start_dry_run() { return false; }
    virtual void finish_dry_run() noexcept {}
    virtual int64_t dry_run_peak_bytes() const { return 0; }  // the most the pass's allocations held at once
    // Whether what allocate() gives now is device memory kiln holds (false while dry: the memory accounting,
    // core/memory.h, leaves such buffers out).
    virtual bool allocations_are_real() const { return true; }

    // Device memory. allocate throws ErrorKind::OutOfMemory naming the bytes asked and free.
    virtual void* allocate(int64_t bytes) = 0;
    virtual void deallocate(void* p) noexcept = 0;
    // Copies, ordered on the backend's stream. upload returns once src may be reused; download once dst holds
    // the bytes (it waits for the work queued before it).
    virtual void upload(void* dst, const void* src, int64_t bytes) = 0;
    // Host memory for bytes that go to the device again and again (weights offloaded under a budget): page-locked
    // where the backend has it, so that upload_async copies straight from it. Null when the host has none to
    // give (then use ordinary memory and upload). Default: ordinary memory.
    virtual void* allocate_host(int64_t bytes);
    virtual void deallocate_host(void* p) noexcept;
    // dst (device) = the bytes at src, memory from allocate_host that stays unchanged until the stream has run
    // the copy: it may return before (CUDA: one DMA transfer, no staging). Default: upload.
    virtual void upload_async(void* dst, const void* src, int64_t bytes) { upload(dst, src, bytes); }
    // The same, ahead of use (a streamed weight block fetched while the one before computes): the copy may overlap
    // the work queued so far, and the stream's later work sees it only after wait_for_uploads_ahead(). Default:
    // upload_async, which needs no wait.
    virtual void upload_ahead(void* dst, const void* src, int64_t bytes) { upload_async(dst, src, bytes); }
    virtual void wait_for_uploads_ahead() {}
    virtual void download(void* dst, const void* src, int64_t bytes) = 0;
    virtual void copy(void* dst, const void* src, int64_t bytes) = 0;
    // `count` runs of `bytes`: run i from src + i * src_pitch to dst + i * dst_pitch (the channels of a band of
    // rows). One copy call per run here; a backend does them as one command.
    virtual void copy_strided(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t bytes,
                              int64_t count) {
        for (int64_t i = 0; i < count; ++i)
            copy(static_cast<char*>(dst) + i * dst_pitch, static_cast<const char*>(src) + i * src_pitch, bytes);
    }
    // dst (host) = the n values at src, of type src_type, widened to float32; returns like download. Here the
    // bytes come over and the host widens them; a backend may widen them on the device first.
    virtual void download_f32(float* dst, const void* src, DType src_type, int64_t n);
    // dst = src rounded to dst_type (both on the device).
    virtual void convert(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) = 0;
    virtual void synchronize() = 0;

    // Whether tensors of this dtype can live and be computed on here (Vulkan has no bfloat16 path).
    virtual bool supports(DType) const { return true; }
    virtual const ops::DeviceOps& ops() const = 0;
    // Whether float32 products may use faster reduced-mantissa arithmetic (TF32 on NVIDIA); off by default.
    virtual void set_fast_float32(bool) {}

    // Forgets the recorded calls whose keys start with `key_prefix` (their weights moved: DeviceBuffer::restore),
    // giving their memory back; the next call with such a key runs eagerly, then records again.
    virtual void forget_recordings(const std::string& key_prefix) { (void)key_prefix; }
    // Runs fn(inputs) as a recorded call: the first call with a key runs it eagerly; the second records it
    // (on CUDA: stream capture into a graph with its own memory pool) and later calls copy the inputs into
    // the recording's buffers and replay it. Inputs must be on this device with the shapes and dtypes the key
    // stands for. The result is a fresh tensor. A call that cannot be recorded keeps running eagerly.
    using RecordedFn = std::function<Tensor(const std::vector<const Tensor*>&)>;
    virtual Tensor run_recorded(const std::string& key, const std::vector<const Tensor*>& inputs,
                                const RecordedFn& fn);
};

// Device storage of a tensor: freed through its backend when the last tensor using it goes.
// A weight's storage may leave the device and come back when a memory budget asks (models/device_weights.h):
// offload() keeps its bytes in host memory and gives the device memory back; restore() takes device memory
// again (at another address: recorded calls that used the old one must be forgotten) and uploads them.
class DeviceBuffer {
public:
    DeviceBuffer(Backend& backend, int64_t bytes);
    ~DeviceBuffer();
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    Backend& backend() const { return *backend_; }
    // The device address; an offloaded buffer's is an InvalidArgument error (a weight used while away).
    void* data() const;
    int64_t bytes() const { return bytes_; }
    bool resident() const { return !offloaded_; }
    // No-ops when already there. offload() downloads the bytes only the first time: weights do not change on
    // the device (a backend may keep them in another layout, which download undoes).
    void offload();
    void restore();
    // restore() through Backend::upload_ahead where the bytes are page-locked: the device holds them once the
    // backend's wait_for_uploads_ahead() has been queued. False where the device had no memory for them (the
    // buffer stays offloaded: a fetch ahead is not needed, restore() will say if it fails).
    bool restore_ahead();

private:
    Backend* backend_;
    void* data_;
    int64_t bytes_;
    MemoryLease lease_;
    bool offloaded_ = false;
    // The bytes, once offloaded (kept while resident again): from backend_->allocate_host, or in host_vector_
    // where it had none.
    void* host_ = nullptr;
    std::vector<uint8_t> host_vector_;
    MemoryLease host_lease_;
};

// ---- registry ----
// A GPU backend registers a factory for its kind: in the kiln program, one that loads the backend's plugin
// when first called (register_backend_plugins in pipeline/backend_plugins.h).
struct BackendFactory {
    std::function<std::vector<DeviceDescription>(std::string* why_none)> list;
    std::function<std::unique_ptr<Backend>(int index)> create;
};
void register_backend_factory(DeviceKind kind, BackendFactory factory);
// The backend of a GPU device, made on first use and kept for the process. The CPU has none: InvalidArgument.
// A kind this build lacks, or a device that is not there: Unsupported naming it and why.
Backend& backend_for(const Device& device);
// Destroys the backends of a kind (the process is ending: a driver that tears itself down at exit needs its
// devices gone first). Tensors still on them must not be used or freed afterwards.
void release_backends(DeviceKind kind);
// Waits for every backend made so far (none is made): the GPU backends then report the op spans they timed
// to a profiler (ops/op_observer.h), which a profile needs before it stops.
void synchronize_backends();
// The allocator counts of every backend made so far, by device name ("cuda:0").
std::vector<std::pair<std::string, AllocatorCounts>> backend_allocator_counts();
// Every device of every registered kind, the CPU first; why_none collects the reasons a kind found none.
std::vector<DeviceDescription> list_devices(std::vector<std::string>* why_none = nullptr);
// "auto": the first GPU that is not emulated (CUDA before Vulkan), else the CPU. Otherwise parse_device(text), checked to exist.
Device resolve_device(const std::string& text);

}  // namespace kiln
