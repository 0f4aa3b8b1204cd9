// The Vulkan backend: one per device, made by the registry (core/backend.h) on first use. Work is recorded
// into one command buffer, every command followed by a full compute/transfer barrier, so the buffer runs
// in order like a CUDA stream; it is submitted when the host needs a result (download, synchronize) or the
// staging memory for uploads is full, and without a wait where copies ahead need a point to follow
// (vulkan_transfer.h: streamed weights copied on a transfer queue while the compute queue works). A recorded call (run_recorded: the UNet, the VAE decode) is recorded
// into a command buffer of its own once and resubmitted afterwards. Memory comes from VulkanMemory (device
// addresses as pointers), the kernels from VulkanKernels (docs/VULKAN.md).
#pragma once
#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/vulkan/physical_devices.h"
#include "backends/vulkan/vulkan_command_ring.h"
#include "backends/vulkan/vulkan_kernels.h"
#include "backends/vulkan/vulkan_timeline.h"
#include "backends/vulkan/vulkan_memory.h"
#include "backends/vulkan/vulkan_transfer.h"
#include "core/backend.h"
#include "core/dry_run.h"
#include "ops/call_recorder.h"
#include "ops/op_list.h"

namespace kiln::vulkan {

class VulkanBackend final : public Backend, private ops::RecordingDevice {
public:
    VulkanBackend(const PhysicalDevice& physical, int index);
    ~VulkanBackend() override;

    Device device() const override { return {DeviceKind::Vulkan, index_}; }
    DeviceDescription describe() const override { return vulkan::describe(physical_, index_, memory_->reserved_bytes()); }
    DeviceMemoryInfo memory_info() const override { return heap_memory(physical_, memory_->reserved_bytes()); }
    int64_t reserved_bytes() const override { return memory_->reserved_bytes(); }
    bool set_memory_limit(int64_t bytes) override {
        memory_->set_limit(bytes);
        return true;
    }
    int64_t memory_limit() const override { return memory_->limit(); }
    AllocatorCounts allocator_counts() const override { return memory_->counts(); }
    void release_cached_memory() override { memory_->release_cached(); }
    // A shape-only pass (core/dry_run.h): the ops run their checks and ask for their tensors and scratch as in a
    // real call, which the backend counts; no kernel, copy or timing runs. Not inside a recorded call.
    bool start_dry_run() override;
    void finish_dry_run() noexcept override { dry_ = false; }
    int64_t dry_run_peak_bytes() const override { return dry_memory_.peak_bytes(); }
    bool allocations_are_real() const override { return !dry_; }
    bool dry_run() const { return dry_; }
    // The largest tensor: within one allocation and within what one kernel operand may span (in the narrowest
    // dtype this backend computes in, float32, the most a planner must assume).
    int64_t max_allocation_bytes() const override {
        const int64_t a = memory_->max_allocation(), b = memory_->max_binding(4);
        return a > 0 ? std::min(a, b) : b;
    }
    int64_t max_binding_bytes(int64_t elem) const { return memory_->max_binding(elem); }
    std::string binding_limit_name() const {
        return memory_->forced_binding() ? "KILN_VULKAN_MAX_BINDING" : "the kernels' 32-bit indices";
    }
    VulkanMemory& memory() { return *memory_; }
    void* allocate(int64_t bytes) override { return dry_ ? dry_memory_.allocate(bytes) : memory_->allocate(bytes); }
    void deallocate(void* p) noexcept override;
    void upload(void* dst, const void* src, int64_t bytes) override;
    void download(void* dst, const void* src, int64_t bytes) override;
    void copy(void* dst, const void* src, int64_t bytes) override;
    void copy_strided(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t bytes,
                      int64_t count) override;
    void convert(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) override;
    void synchronize() override;
    // Block formats (Q8_0 ... Q6_K) are kept as blocks and dequantized beside each product (dequantize.comp).
    bool supports(DType t) const override {
        return t == DType::F32 || (t == DType::F16 && physical_.fp16_storage) || is_block_quantized(t);
    }
    const ops::DeviceOps& ops() const override { return *ops_; }
    // The second call with a key records fn into a command buffer (its memory from a pool of its own); later
    // calls copy the inputs in and resubmit it (ops/call_recorder.h keeps them). A call that needs the host
    // inside (an upload or download) cannot be recorded and runs eagerly from then on. KILN_VULKAN_RECORD=0
    // runs every call eagerly.
    void forget_recordings(const std::string& key_prefix) override;
    // Host-visible memory that copies go from straight to the device (weights offloaded under --vram): carved
    // from 64 MiB slabs (drivers cap the number of allocations), a slab freed with its last block.
    void* allocate_host(int64_t bytes) override;
    void deallocate_host(void* p) noexcept override;
    void upload_async(void* dst, const void* src, int64_t bytes) override;
    // Copies ahead (a streamed block's weights while the block before runs): recorded on the transfer queue
    // (vulkan_transfer.h) after the compute work submitted so far; the compute work after wait_for_uploads_ahead
    // waits for them. In line (upload_async) inside a recorded call, with KILN_VULKAN_UPLOAD_AHEAD=0, or where
    // the device has no timeline semaphores.
    void upload_ahead(void* dst, const void* src, int64_t bytes) override;
    void wait_for_uploads_ahead() override;
    // Copies ahead on (on a queue as KILN_VULKAN_TRANSFER_QUEUE picks, Auto: the best the device has) or off
    // (in line); waits for the device first. Tests switch with it.
    void set_upload_ahead(bool on, TransferQueue queue = TransferQueue::Auto);
    // The queue copies ahead run on (never Auto), or Auto when they are off.
    TransferQueue upload_ahead_queue() const { return transfer_ ? transfer_->kind() : TransferQueue::Auto; }
    Tensor run_recorded(const std::string& key, const std::vector<const Tensor*>& inputs,
                        const RecordedFn& fn) override;

    // Records kernel `name` with push constants `params` over x * y * z workgroups.
    template <class Params>
    void dispatch(const char* name, const Params& params, uint32_t x, uint32_t y = 1, uint32_t z = 1) {
        static_assert(sizeof(Params) <= kPushConstantBytes && sizeof(Params) % 4 == 0, "push constants");
        dispatch_bytes(name, &params, sizeof(Params), x, y, z);
    }
    void dispatch_bytes(const char* name, const void* params, uint32_t bytes, uint32_t x, uint32_t y, uint32_t z);
    const PhysicalDevice& physical() const { return physical_; }
    // KILN_VULKAN_SYNC_OPS=1: submit and wait after every kernel, so that --profile shows device time per op.
    bool sync_ops() const { return sync_ops_; }
    // Which build of the product kernels (matmul, conv2d) runs: on GPUs the first call of each shape times
    // 128x128 and 64x64 tiles, and for float16 products the matrix units where the device has them
    // (PhysicalDevice::matrix_products), and keeps the fastest (Measured); on a device that runs on the CPU,
    // where barriers are expensive, Direct (no shared memory). KILN_VULKAN_GEMM=large|small|direct|matrix|measured|
    // rows64|cols64 overrides (matrix: on the matrix units wherever they can run it, else 128x128 tiles; rows64 and
    // cols64: the 64x128 and 128x64 tiles for matmul and conv2d, 128x128 for the other products); tests switch
    // with set_products.
    enum class Products { Measured, Large, Small, Direct, Matrix, Rows64, Cols64 };
    Products products() const { return products_; }
    void set_products(Products p) { products_ = p; }
    // Split-K slices: 0 lets each product decide (VulkanDeviceOps::split_k), N forces N (1: never split).
    // KILN_VULKAN_SPLIT_K=N sets it; tests switch with set_split_k.
    int split_k() const { return split_k_; }
    void set_split_k(int slices) { split_k_ = slices; }
    // The tiled builds' convolutions write their input out as columns in chunks of at most this many bytes
    // (VulkanDeviceOps::conv_from_columns; 0: its own sizing). Tests set it small to cut a convolution into chunks.
    int64_t columns_chunk_bytes() const { return columns_chunk_bytes_; }
    void set_columns_chunk_bytes(int64_t bytes) { columns_chunk_bytes_ = bytes; }
    // Queries a workgroup of the FMA flash kernel takes: 64, 128 (two row groups a thread, heads of up to 64
    // dimensions), or 0: 128 where that still makes enough workgroups (VulkanDeviceOps::flash_attention).
    // KILN_VULKAN_FLASH_QUERIES=64|128 chooses; tests switch with set_flash_queries.
    int flash_queries() const { return flash_queries_; }
    void set_flash_queries(int queries) { flash_queries_ = queries; }
    // Attention as two products and a softmax over blocks of queries whose float32 scores stay under 64 MiB
    // (Products), or in one kernel with no score matrix in memory (Flash, flash_attention.comp: the least memory
    // and no score traffic; on the H200 since session 20 as fast as the products in float32 and 3% faster in
    // float16 over a whole UNet call; 20x slower on lavapipe, whose barriers are coroutine switches). Flash takes
    // heads of up to 256 dimensions on devices with its shared memory; other attentions take the products either
    // way. Matrix is flash attention on the matrix units (flash_attention_coop.comp) where the KHR matrix kernels
    // run, for float16 heads of up to 160 dimensions, else Flash. The default: Matrix, but Products on a device
    // that runs on the CPU. KILN_VULKAN_ATTENTION=matrix|products|flash chooses; tests switch with set_attention.
    enum class Attention { Flash, Products, Matrix };
    Attention attention() const { return attention_; }
    void set_attention(Attention a) { attention_ = a; }
    // q8_0 weights: dequantized into a transient weight before each product like every block format (Transient,
    // the default: ops/device_weight.h), or read as blocks by the FMA builds of the products themselves (Fused:
    // the "_q8" kernels, no transient; not yet measured against Transient on a GPU).
    // KILN_VULKAN_Q8=transient|fused chooses; tests switch with set_q8_products.
    enum class Q8Products { Transient, Fused };
    Q8Products q8_products() const { return q8_products_; }
    void set_q8_products(Q8Products q) { q8_products_ = q; }
    // Issue 23's matrix kernels: "" gemm_coop.glsl, "_<name>" another of its geometries, set by
    // KILN_VULKAN_COOP=base|<name>; an error where the matrix units run the NV build, no effect without them.
    // Default: "_sg32" where the KHR kernels run (measured faster on the H200), else "".
    const std::string& matrix_variant() const { return matrix_variant_; }
    uint32_t matrix_tile_n() const {  // its tiles: 128 x this
        return matrix_variant_ == "_sg32" ? 64 : 128;
    }
    void set_matrix_variant(const std::string& name);  // "base" or a listed name, else InvalidArgument
    // Inside run_recorded's recording nothing may wait for the device (so nothing is timed there).
    bool recording_call() const { return capturing_; }
    // Submits what is recorded and waits for it.
    void finish() { submit_and_wait(); }
    // GPU timestamps around one op (vulkan_timeline.h), while a profiler wants device spans.
    void time_begin(ops::OpKind kind, double flops);
    void time_end() noexcept;
    VulkanKernels& kernels() { return *kernels_; }

private:
    // ops::RecordingDevice: a recorded call is a command buffer of its own, submitted after the stream's
    // commands. Off with KILN_VULKAN_RECORD=0 or KILN_VULKAN_SYNC_OPS=1, and while a profiler wants GPU time per
    // op (each op must write its timestamps).
    class RecordedCommands;
    bool recording_enabled() const override;
    int new_pool() override { return memory_->new_pool(); }
    void use_pool(int pool) override { memory_->set_current_pool(pool); }
    void release_pool(int pool) noexcept override { memory_->release_pool(pool); }
    void before_recording() override { submit_and_wait(); }
    void begin_recording() override;
    std::unique_ptr<ops::RecordedWork> end_recording() override;
    void abort_recording() noexcept override;
    void wait_idle() override { submit_and_wait(); }

    void record_begin();
    void record_barrier();
    // Runs what is recorded (then `recorded`, a recorded call's buffer, if given) and waits; the staging
    // memory is free again after it. Inside a recording: an Unsupported error (the host cannot wait there).
    void submit_and_wait(VkCommandBuffer recorded = VK_NULL_HANDLE);
    // Submits what is recorded without waiting (copies ahead follow it, or it must not wait for them); the
    // stream records into a fresh buffer after it. Only where copies ahead are on.
    void flush();
    struct HostRange {
        VkBuffer buffer;
        VkDeviceSize offset;
    };
    // Where bytes from allocate_host lie; InvalidArgument naming `what` for other memory.
    HostRange host_range(const void* src, int64_t bytes, const char* what) const;
    void copy_to_staging(const void* src, int64_t bytes, int64_t staging_offset);

    PhysicalDevice physical_;
    int index_;
    VkDevice device_ = VK_NULL_HANDLE;
    VkQueue queue_ = VK_NULL_HANDLE;
    VkCommandPool pool_ = VK_NULL_HANDLE;
    std::unique_ptr<VulkanTimeline> timeline_;
    VkCommandBuffer commands_ = VK_NULL_HANDLE;  // the stream's buffer
    std::unique_ptr<CommandRing> ring_;  // flushed buffers, by the compute value each signals, and spares
    TransferQueues transfer_queues_;
    std::unique_ptr<VulkanTransfer> transfer_;  // null: copies in line
    std::vector<const void*> ahead_destinations_;  // of the copies no compute submission waits for yet
    VkCommandBuffer target_ = VK_NULL_HANDLE;    // where commands go: commands_, or a recording's buffer
    bool capturing_ = false;
    bool dry_ = false;  // start_dry_run
    DryRunMemory dry_memory_;
    bool recording_enabled_ = true;
    ops::CallRecorder recorder_;
    VkCommandBuffer recording_buffer_ = VK_NULL_HANDLE;  // a recorded call's, between begin_ and end_recording
    VkFence fence_ = VK_NULL_HANDLE;
    bool recording_ = false;
    bool sync_ops_ = false;
    Products products_ = Products::Measured;
    int split_k_ = 0;
    int64_t columns_chunk_bytes_ = 0;
    int flash_queries_ = 0;
    Attention attention_ = Attention::Products;
    Q8Products q8_products_ = Q8Products::Transient;
    std::string matrix_variant_;
    int64_t recorded_ = 0;  // commands in the buffer since the last submit
    // Host-visible memory that uploads are staged through and downloads come back in.
    VkBuffer staging_ = VK_NULL_HANDLE;
    VkDeviceMemory staging_memory_ = VK_NULL_HANDLE;
    char* staging_map_ = nullptr;
    int64_t staging_bytes_ = 0, staging_used_ = 0;
    struct HostSlab {
        VkBuffer buffer = VK_NULL_HANDLE;
        VkDeviceMemory memory = VK_NULL_HANDLE;
        char* map = nullptr;
        int64_t size = 0, used = 0;
        int live = 0;  // blocks handed out and not yet given back
    };
    void free_host_slab(HostSlab* slab) noexcept;
    std::vector<std::unique_ptr<HostSlab>> host_slabs_;
    std::map<const char*, HostSlab*> host_blocks_;  // each block's start -> its slab
    std::unique_ptr<VulkanMemory> memory_;
    std::unique_ptr<VulkanKernels> kernels_;
    std::unique_ptr<ops::DeviceOps> ops_;
};

// The registry's factory for Vulkan devices (list and create).
BackendFactory vulkan_backend_factory();

// The developer settings KILN_VULKAN_GEMM (unset: Measured on a GPU, Direct on a device that runs on the CPU)
// KILN_VULKAN_SPLIT_K (unset: 0, automatic) and KILN_VULKAN_ATTENTION; a value they do not take is an InvalidArgument naming it.
VulkanBackend::Products products_from_env(const char* value, bool runs_on_cpu);
// KILN_VULKAN_ATTENTION (unset: Products).
VulkanBackend::Attention attention_from_env(const char* value, bool runs_on_cpu);
int flash_queries_from_env(const char* value);
VulkanBackend::Q8Products q8_products_from_env(const char* value);
// The variants' names, as kernels.cmake builds them (not "base").
const std::vector<std::string>& matrix_variants();
int split_k_from_env(const char* value);

}  // namespace kiln::vulkan
