#include "backends/vulkan/vulkan_backend.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "backends/vulkan/vulkan_device_ops.h"
#include "core/split_blocks.h"
#include "kiln/error.h"
#include "ops/op_observer.h"

namespace kiln::vulkan {

namespace {

constexpr int64_t kStagingBytes = int64_t(64) << 20;

uint32_t host_memory_type(const PhysicalDevice& d, uint32_t allowed) {
    VkPhysicalDeviceMemoryProperties mem;
    api().vkGetPhysicalDeviceMemoryProperties(d.handle, &mem);
    const VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    // Cached host memory reads back fast (downloads); plain coherent memory is the fallback.
    for (VkMemoryPropertyFlags extra : {VkMemoryPropertyFlags(VK_MEMORY_PROPERTY_HOST_CACHED_BIT), VkMemoryPropertyFlags(0)})
        for (uint32_t i = 0; i < mem.memoryTypeCount; ++i)
            if ((allowed & (1u << i)) && (mem.memoryTypes[i].propertyFlags & (want | extra)) == (want | extra)) return i;
    fail(ErrorKind::Unsupported, std::string(d.properties.deviceName) + ": no host-visible coherent memory");
}

}  // namespace

VulkanBackend::Products products_from_env(const char* value, bool runs_on_cpu) {
    using P = VulkanBackend::Products;
    const std::string v = value ? value : "";
    if (v.empty()) return runs_on_cpu ? P::Direct : P::Measured;
    for (auto [name, p] : {std::pair{"measured", P::Measured}, {"large", P::Large}, {"small", P::Small},
                           {"direct", P::Direct}, {"matrix", P::Matrix}, {"rows64", P::Rows64}, {"cols64", P::Cols64}})
        if (v == name) return p;
    fail(ErrorKind::InvalidArgument,
         "KILN_VULKAN_GEMM=" + v + ": expected measured, large, small, direct, matrix, rows64 or cols64");
}

int split_k_from_env(const char* value) {
    const std::string v = value ? value : "";
    if (v.empty()) return 0;
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    require(*end == '\0' && n >= 0 && n <= 64, ErrorKind::InvalidArgument,
            "KILN_VULKAN_SPLIT_K=" + v + ": expected a number of slices from 0 (automatic) to 64 (1: no split)");
    return int(n);
}

VulkanBackend::Attention attention_from_env(const char* value, bool runs_on_cpu) {
    using A = VulkanBackend::Attention;
    const std::string v = value ? value : "";
    // On a device that runs on the CPU (lavapipe) the flash kernels' barriers are coroutine switches and the
    // products 20x faster.
    if (v.empty()) return runs_on_cpu ? A::Products : A::Matrix;
    if (v == "matrix") return A::Matrix;
    if (v == "flash") return A::Flash;
    if (v == "products") return A::Products;
    fail(ErrorKind::InvalidArgument, "KILN_VULKAN_ATTENTION=" + v + ": expected matrix, flash or products");
}

int flash_queries_from_env(const char* value) {
    const std::string v = value ? value : "";
    if (v.empty()) return 0;
    if (v == "64" || v == "128") return std::stoi(v);
    fail(ErrorKind::InvalidArgument, "KILN_VULKAN_FLASH_QUERIES=" + v + ": expected 64 or 128");
}

VulkanBackend::Q8Products q8_products_from_env(const char* value) {
    using Q = VulkanBackend::Q8Products;
    const std::string v = value ? value : "";
    if (v.empty() || v == "transient") return Q::Transient;
    if (v == "fused") return Q::Fused;
    fail(ErrorKind::InvalidArgument, "KILN_VULKAN_Q8=" + v + ": expected transient or fused");
}

const std::vector<std::string>& matrix_variants() {
    static const std::vector<std::string> names{"sg32", "f16acc", "sg32w"};
    return names;
}

void VulkanBackend::set_matrix_variant(const std::string& name) {
    const std::string setting = "KILN_VULKAN_COOP=" + name + ": ", device = physical_.properties.deviceName;
    const auto& names = matrix_variants();
    if (name.empty() || name == "base") return matrix_variant_.clear();
    std::string list = "base";
    for (const std::string& n : names) list += ", " + n;
    require(std::find(names.begin(), names.end(), name) != names.end(), ErrorKind::InvalidArgument,
            setting + "expected one of " + list);
    require(!physical_.matrix_products || physical_.matrix_khr, ErrorKind::InvalidArgument,
            setting + "the variants are VK_KHR_cooperative_matrix kernels; " + device + " runs the NV build");
    require(!physical_.matrix_products || name != "f16acc" || khr_float16_sums(physical_), ErrorKind::Unsupported,
            setting + device + " offers no 16x16x16 float16 products with float16 sums");
    matrix_variant_ = "_" + name;
}

VulkanBackend::VulkanBackend(const PhysicalDevice& physical, int index)
    : physical_(physical),
      index_(index),
      recorder_(*this, ops::max_recordings_from_env(std::getenv("KILN_RECORDINGS_MAX"))) {
    const char* sync = std::getenv("KILN_VULKAN_SYNC_OPS");
    sync_ops_ = sync && std::string(sync) == "1";
    const char* record = std::getenv("KILN_VULKAN_RECORD");
    recording_enabled_ = !(record && std::string(record) == "0") && !sync_ops_;
    const bool runs_on_cpu = physical_.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    products_ = products_from_env(std::getenv("KILN_VULKAN_GEMM"), runs_on_cpu);
    split_k_ = split_k_from_env(std::getenv("KILN_VULKAN_SPLIT_K"));
    attention_ = attention_from_env(std::getenv("KILN_VULKAN_ATTENTION"), runs_on_cpu);
    flash_queries_ = flash_queries_from_env(std::getenv("KILN_VULKAN_FLASH_QUERIES"));
    q8_products_ = q8_products_from_env(std::getenv("KILN_VULKAN_Q8"));
    // The matrix kernel: sg32's 32x32 blocks a subgroup where the KHR kernels run (session 19, H200: SD 1.5 UNet
    // call 101.6 ms against base's 125.8, docs/VULKAN.md), unless KILN_VULKAN_COOP names another.
    const char* coop = std::getenv("KILN_VULKAN_COOP");
    set_matrix_variant(coop ? coop : physical_.matrix_products && physical_.matrix_khr ? "sg32" : "base");
    const bool ahead = upload_ahead_from_env(std::getenv("KILN_VULKAN_UPLOAD_AHEAD"));
    const TransferQueue ahead_queue = transfer_queue_from_env(std::getenv("KILN_VULKAN_TRANSFER_QUEUE"));
    const Api& a = api();
    // The compute queue, and the queues copies ahead may use (vulkan_transfer.h): a second of the compute family
    // and one of a transfer-only family, where the device has them.
    transfer_queues_ = vulkan::transfer_queues(physical_.handle, physical_.queue_family);
    const float priorities[] = {1.0f, 1.0f};
    VkDeviceQueueCreateInfo queues[2] = {{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO},
                                         {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO}};
    queues[0].queueFamilyIndex = physical_.queue_family;
    queues[0].queueCount = transfer_queues_.compute_queues;
    queues[0].pQueuePriorities = priorities;
    queues[1].queueFamilyIndex = uint32_t(std::max<int64_t>(transfer_queues_.family, 0));
    queues[1].queueCount = 1;
    queues[1].pQueuePriorities = priorities;
    VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    f12.bufferDeviceAddress = VK_TRUE;
    f12.timelineSemaphore = transfer_queues_.timelines ? VK_TRUE : VK_FALSE;
    VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    f11.storageBuffer16BitAccess = physical_.fp16_storage ? VK_TRUE : VK_FALSE;
    f11.pNext = &f12;
    VkDeviceCreateInfo info{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    info.pNext = &f11;
    // What gemm_coop.glsl needs, where physical_devices found it all: one of the two matrix extensions, and
    // subgroup size control where its pipelines ask for 32-wide subgroups.
    VkPhysicalDeviceCooperativeMatrixFeaturesNV coop_nv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR coop_khr{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
    VkPhysicalDeviceSubgroupSizeControlFeaturesEXT control{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT};
    std::vector<const char*> extensions;
    if (physical_.matrix_products) {
        f12.shaderFloat16 = VK_TRUE;
        f12.vulkanMemoryModel = VK_TRUE;
        if (physical_.matrix_khr) {
            coop_khr.cooperativeMatrix = VK_TRUE;
            f12.pNext = &coop_khr;
            extensions.push_back("VK_KHR_cooperative_matrix");
        } else {
            coop_nv.cooperativeMatrix = VK_TRUE;
            f12.pNext = &coop_nv;
            extensions.push_back("VK_NV_cooperative_matrix");
        }
        if (physical_.matrix_subgroup_32) {
            control.subgroupSizeControl = VK_TRUE;
            (physical_.matrix_khr ? coop_khr.pNext : coop_nv.pNext) = &control;
            extensions.push_back(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
        }
    }
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR stats{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
    if (physical_.statistics) {  // KILN_VULKAN_STATS=1
        stats.pipelineExecutableInfo = VK_TRUE;
        stats.pNext = &f11;
        info.pNext = &stats;
        extensions.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
    }
    info.enabledExtensionCount = uint32_t(extensions.size());
    info.ppEnabledExtensionNames = extensions.data();
    info.queueCreateInfoCount = transfer_queues_.family >= 0 ? 2 : 1;
    info.pQueueCreateInfos = queues;
    check(a.vkCreateDevice(physical_.handle, &info, nullptr, &device_),
          std::string("vkCreateDevice (") + physical_.properties.deviceName + ")");
    a.vkGetDeviceQueue(device_, physical_.queue_family, 0, &queue_);

    VkCommandPoolCreateInfo pool{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pool.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pool.queueFamilyIndex = physical_.queue_family;
    check(a.vkCreateCommandPool(device_, &pool, nullptr, &pool_), "vkCreateCommandPool");
    ring_ = std::make_unique<CommandRing>(device_, pool_, "");
    commands_ = ring_->next(0);
    target_ = commands_;
    VkFenceCreateInfo fence{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    check(a.vkCreateFence(device_, &fence, nullptr, &fence_), "vkCreateFence");

    VkBufferCreateInfo staging{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    staging.size = kStagingBytes;
    staging.usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    check(a.vkCreateBuffer(device_, &staging, nullptr, &staging_), "vkCreateBuffer (staging)");
    VkMemoryRequirements req;
    a.vkGetBufferMemoryRequirements(device_, staging_, &req);
    VkMemoryAllocateInfo alloc{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    alloc.allocationSize = req.size;
    alloc.memoryTypeIndex = host_memory_type(physical_, req.memoryTypeBits);
    check(a.vkAllocateMemory(device_, &alloc, nullptr, &staging_memory_), "vkAllocateMemory (staging, 64 MiB)");
    check(a.vkBindBufferMemory(device_, staging_, staging_memory_, 0), "vkBindBufferMemory (staging)");
    void* map = nullptr;
    check(a.vkMapMemory(device_, staging_memory_, 0, VK_WHOLE_SIZE, 0, &map), "vkMapMemory (staging)");
    staging_map_ = static_cast<char*>(map);
    staging_bytes_ = kStagingBytes;

    memory_ = std::make_unique<VulkanMemory>(device_, physical_, device_name(device()), [this] { synchronize(); });
    memory_->set_split_policy(
        split_policy_setting("KILN_VULKAN_SPLIT_BLOCKS", std::getenv("KILN_VULKAN_SPLIT_BLOCKS"), SplitPolicy::Always));
    kernels_ = std::make_unique<VulkanKernels>(device_, physical_);
    uint32_t families = 0;
    a.vkGetPhysicalDeviceQueueFamilyProperties(physical_.handle, &families, nullptr);
    std::vector<VkQueueFamilyProperties> family(families);
    a.vkGetPhysicalDeviceQueueFamilyProperties(physical_.handle, &families, family.data());
    timeline_ = std::make_unique<VulkanTimeline>(device_, device_name(device()), physical_.properties.limits.timestampPeriod,
                                                 family[physical_.queue_family].timestampValidBits,
                                                 [this] { submit_and_wait(); });
    ops_ = std::make_unique<VulkanDeviceOps>(*this);
    if (ahead) set_upload_ahead(true, ahead_queue);
}

void VulkanBackend::set_upload_ahead(bool on, TransferQueue queue) {
    synchronize();  // nothing in flight on the queue being left
    transfer_.reset();
    if (on && transfer_queues_.timelines) transfer_ = std::make_unique<VulkanTransfer>(device_, transfer_queues_, queue);
    if (const char* v = std::getenv("KILN_VULKAN_VERBOSE"); v && *v == '1')
        std::fprintf(stderr, "%s: streamed weights copied %s%s (compute family %u with %u queue(s) for kiln; "
                     "transfer-only family %s)\n", device_name(device()).c_str(), transfer_ ? "ahead on queue " : "in line",
                     transfer_ ? transfer_queue_name(transfer_->kind()) : on ? ", no timeline semaphores" : "",
                     physical_.queue_family, transfer_queues_.compute_queues,
                     transfer_queues_.family >= 0 ? std::to_string(transfer_queues_.family).c_str() : "none");
}

bool VulkanBackend::start_dry_run() {
    require(!dry_, ErrorKind::InvalidArgument, device_name(device()) + ": a dry run inside another");
    if (capturing_) return false;
    dry_memory_.reset();
    dry_ = true;
    return true;
}

void VulkanBackend::time_begin(ops::OpKind kind, double flops) {
    if (dry_) return;
    record_begin();
    timeline_->begin(target_, kind, flops);
}

void VulkanBackend::time_end() noexcept {
    if (dry_) return;
    // The op may have waited for the device inside (a product timing its builds): the stream's buffer is
    // then reset, and the end's timestamp begins it again. A buffer that cannot begin loses the span.
    try {
        record_begin();
        timeline_->end(target_);
    } catch (...) {
    }
}

VulkanBackend::~VulkanBackend() {
    const Api& a = api();
    // Commands recorded but never submitted (an error ended the run between two submits) are dropped, not run: no
    // one will read their results. Running them at exit hung on lavapipe, which compiles a pipeline when it first
    // runs, with an LLVM whose state, made at its first compile, was already destroyed by then (injected
    // allocation failures found it: tests/cli/allocation_failure_test.cpp).
    if (recording_) {
        a.vkEndCommandBuffer(commands_);
        a.vkResetCommandBuffer(commands_, 0);
        recording_ = false;
    }
    a.vkDeviceWaitIdle(device_);
    transfer_.reset();  // an open batch of copies is dropped like the commands above
    recorder_.clear();  // their tensors go back to the memory below
    ops_.reset();
    timeline_.reset();
    kernels_.reset();
    memory_.reset();
    for (const auto& slab : host_slabs_) free_host_slab(slab.get());  // blocks still out: their owners outlived us
    host_slabs_.clear();
    a.vkUnmapMemory(device_, staging_memory_);
    a.vkDestroyBuffer(device_, staging_, nullptr);
    a.vkFreeMemory(device_, staging_memory_, nullptr);
    a.vkDestroyFence(device_, fence_, nullptr);
    a.vkDestroyCommandPool(device_, pool_, nullptr);
    a.vkDestroyDevice(device_, nullptr);
}

void VulkanBackend::record_begin() {
    // Copies ahead start as soon as the stream records what comes after them (the block they overlap).
    if (transfer_ && transfer_->batch_open()) transfer_->submit_batch();
    if (capturing_ || recording_) return;  // a recording's buffer was begun by run_recorded
    VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    check(api().vkBeginCommandBuffer(commands_, &begin), "vkBeginCommandBuffer");
    recording_ = true;
}

void VulkanBackend::record_barrier() {
    // Every command sees the results of every earlier one: the order of a stream, which the ops layer assumes.
    VkMemoryBarrier b{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    b.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    b.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                      VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_HOST_READ_BIT;
    const VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    api().vkCmdPipelineBarrier(target_, stages, stages | VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &b, 0, nullptr, 0,
                               nullptr);
    if (!capturing_) ++recorded_;
}

void VulkanBackend::submit_and_wait(VkCommandBuffer recorded) {
    require(!capturing_, ErrorKind::Unsupported, "vulkan: the host waits for the device inside a recorded call");
    // Copies ahead are waited for too: the host memory they read may go after this, and later work sees them.
    if (transfer_ && transfer_->copies_unwaited()) wait_for_uploads_ahead();
    if (recorded != VK_NULL_HANDLE) record_begin();  // submitted together, the stream's commands first
    // Flushed work (copies ahead on) is waited for by the fence of a submission after it, even an empty one.
    const bool flushed = ring_->busy() || (transfer_ && transfer_->compute_wait_pending());
    if (recording_ || flushed) {
        const Api& a = api();
        const bool began = recording_;
        if (began) check(a.vkEndCommandBuffer(commands_), "vkEndCommandBuffer");
        recording_ = false;
        const bool work = began && (recorded_ > 0 || recorded != VK_NULL_HANDLE);
        if (work || flushed) {
            const VkCommandBuffer buffers[] = {commands_, recorded};
            VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
            submit.commandBufferCount = !work ? 0 : recorded != VK_NULL_HANDLE ? 2 : 1;
            submit.pCommandBuffers = buffers;
            if (transfer_) transfer_->compute_submit(submit);
            check(a.vkQueueSubmit(queue_, 1, &submit, fence_), "vkQueueSubmit");
            check(a.vkWaitForFences(device_, 1, &fence_, VK_TRUE, UINT64_MAX), "vkWaitForFences");
            check(a.vkResetFences(device_, 1, &fence_), "vkResetFences");
            timeline_->synchronized();
        }
        if (began) check(a.vkResetCommandBuffer(commands_, 0), "vkResetCommandBuffer");
        recorded_ = 0;
        ring_->all_done();
        if (transfer_) transfer_->all_done();
    }
    staging_used_ = 0;
    kernels_->save_cache();  // when pipelines were made since the last save (the first steps of a run)
}

void VulkanBackend::synchronize() { submit_and_wait(); }

void VulkanBackend::flush() {
    const Api& a = api();
    VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    const bool began = recording_;
    if (began) {
        check(a.vkEndCommandBuffer(commands_), "vkEndCommandBuffer");
        recording_ = false;
        submit.commandBufferCount = 1;
        submit.pCommandBuffers = &commands_;
    }
    const uint64_t value = transfer_->compute_submit(submit);
    check(a.vkQueueSubmit(queue_, 1, &submit, VK_NULL_HANDLE), "vkQueueSubmit");
    recorded_ = 0;
    if (!began) return;
    ring_->submitted(commands_, value);
    commands_ = target_ = ring_->next(transfer_->compute_reached());
}

void VulkanBackend::dispatch_bytes(const char* name, const void* params, uint32_t bytes, uint32_t x, uint32_t y,
                                   uint32_t z) {
    if (x == 0 || y == 0 || z == 0 || dry_) return;
    const VkPipeline p = kernels_->pipeline(name);
    record_begin();
    const Api& a = api();
    a.vkCmdBindPipeline(target_, VK_PIPELINE_BIND_POINT_COMPUTE, p);
    a.vkCmdPushConstants(target_, kernels_->layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, bytes, params);
    a.vkCmdDispatch(target_, x, y, z);
    record_barrier();
    if (sync_ops_) submit_and_wait();
}

void VulkanBackend::upload(void* dst, const void* src, int64_t bytes) {
    if (DryRunMemory::owns(dst)) return;  // a dry run's tensor (core/dry_run.h): no memory behind it
    // Staged without waiting: the copies run at the next submit, and src may be reused at once. Not inside a
    // recording, whose replays would copy whatever the staging memory then holds.
    require(!capturing_, ErrorKind::Unsupported, "vulkan: an upload inside a recorded call");
    const char* from = static_cast<const char*>(src);
    char* to = static_cast<char*>(dst);
    while (bytes > 0) {
        if (staging_used_ == staging_bytes_) submit_and_wait();
        const int64_t n = std::min(bytes, staging_bytes_ - staging_used_);
        std::memcpy(staging_map_ + staging_used_, from, static_cast<size_t>(n));
        const VulkanMemory::Location where = memory_->locate(to);
        record_begin();
        VkBufferCopy region{VkDeviceSize(staging_used_), where.offset, VkDeviceSize(n)};
        api().vkCmdCopyBuffer(commands_, staging_, where.buffer, 1, &region);
        record_barrier();
        staging_used_ += n;
        from += n;
        to += n;
        bytes -= n;
    }
}

void* VulkanBackend::allocate_host(int64_t bytes) {
    constexpr int64_t kSlab = int64_t(64) << 20, kAlign = 256;
    const int64_t size = (bytes + kAlign - 1) / kAlign * kAlign;
    HostSlab* slab = host_slabs_.empty() ? nullptr : host_slabs_.back().get();
    if (!slab || slab->used + size > slab->size) {
        const Api& a = api();
        auto made = std::make_unique<HostSlab>();
        made->size = std::max(size, kSlab);
        VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
        info.size = VkDeviceSize(made->size);
        info.usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT;
        // Read by the compute queue (copies in line) and by a transfer-only family's queue (copies ahead).
        const uint32_t families[] = {physical_.queue_family, uint32_t(std::max<int64_t>(transfer_queues_.family, 0))};
        if (transfer_queues_.family >= 0) {
            info.sharingMode = VK_SHARING_MODE_CONCURRENT;
            info.queueFamilyIndexCount = 2;
            info.pQueueFamilyIndices = families;
        }
        if (a.vkCreateBuffer(device_, &info, nullptr, &made->buffer) != VK_SUCCESS) return nullptr;
        VkMemoryRequirements req;
        a.vkGetBufferMemoryRequirements(device_, made->buffer, &req);
        VkMemoryAllocateInfo alloc{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
        alloc.allocationSize = req.size;
        void* map = nullptr;
        try {
            alloc.memoryTypeIndex = host_memory_type(physical_, req.memoryTypeBits);
        } catch (const Error&) {
            a.vkDestroyBuffer(device_, made->buffer, nullptr);
            return nullptr;
        }
        // The host may refuse (it is host memory): the caller keeps the bytes in ordinary memory then.
        if (a.vkAllocateMemory(device_, &alloc, nullptr, &made->memory) != VK_SUCCESS ||
            a.vkBindBufferMemory(device_, made->buffer, made->memory, 0) != VK_SUCCESS ||
            a.vkMapMemory(device_, made->memory, 0, VK_WHOLE_SIZE, 0, &map) != VK_SUCCESS) {
            if (made->memory) a.vkFreeMemory(device_, made->memory, nullptr);
            a.vkDestroyBuffer(device_, made->buffer, nullptr);
            return nullptr;
        }
        made->map = static_cast<char*>(map);
        host_slabs_.push_back(std::move(made));
        slab = host_slabs_.back().get();
    }
    char* block = slab->map + slab->used;
    slab->used += size;
    ++slab->live;
    host_blocks_[block] = slab;
    return block;
}

void VulkanBackend::free_host_slab(HostSlab* slab) noexcept {
    const Api& a = api();
    a.vkUnmapMemory(device_, slab->memory);
    a.vkDestroyBuffer(device_, slab->buffer, nullptr);
    a.vkFreeMemory(device_, slab->memory, nullptr);
}

void VulkanBackend::deallocate_host(void* p) noexcept {
    auto it = host_blocks_.find(static_cast<const char*>(p));
    if (it == host_blocks_.end()) return;
    HostSlab* slab = it->second;
    host_blocks_.erase(it);
    if (--slab->live > 0) return;
    try {
        submit_and_wait();  // a queued copy may still read it
    } catch (...) {
    }
    for (auto s = host_slabs_.begin(); s != host_slabs_.end(); ++s)
        if (s->get() == slab) {
            free_host_slab(slab);
            host_slabs_.erase(s);
            break;
        }
}

VulkanBackend::HostRange VulkanBackend::host_range(const void* src, int64_t bytes, const char* what) const {
    const std::string why = std::string("vulkan: ") + what + " from memory allocate_host did not give";
    auto it = host_blocks_.upper_bound(static_cast<const char*>(src));
    require(it != host_blocks_.begin(), ErrorKind::InvalidArgument, why);
    const HostSlab* slab = std::prev(it)->second;
    const int64_t offset = static_cast<const char*>(src) - slab->map;
    require(offset >= 0 && offset + bytes <= slab->used, ErrorKind::InvalidArgument, why);
    return {slab->buffer, VkDeviceSize(offset)};
}

void VulkanBackend::upload_async(void* dst, const void* src, int64_t bytes) {
    if (bytes <= 0 || DryRunMemory::owns(dst)) return;
    require(!capturing_, ErrorKind::Unsupported, "vulkan: an upload inside a recorded call");
    const HostRange from = host_range(src, bytes, "upload_async");
    const VulkanMemory::Location where = memory_->locate(dst);
    record_begin();
    VkBufferCopy region{from.offset, where.offset, VkDeviceSize(bytes)};
    api().vkCmdCopyBuffer(commands_, from.buffer, where.buffer, 1, &region);
    record_barrier();
}

void VulkanBackend::upload_ahead(void* dst, const void* src, int64_t bytes) {
    if (DryRunMemory::owns(dst)) return;
    // A recorded call copies in line: its replays could not wait for copies made once.
    if (!transfer_ || capturing_) return upload_async(dst, src, bytes);
    if (bytes <= 0) return;
    const HostRange from = host_range(src, bytes, "upload_ahead");
    const VulkanMemory::Location to = memory_->locate(dst);
    // dst was just allocated, and blocks are reused in the compute stream's order: work recorded before may still
    // read what it held. So that work is submitted first, and the copy waits for it (and for a pending wait for
    // earlier copies, which orders two copies into the same memory).
    if (recorded_ > 0 || transfer_->compute_wait_pending()) flush();
    transfer_->copy(from.buffer, from.offset, to.buffer, to.offset, VkDeviceSize(bytes));
    ahead_destinations_.push_back(dst);
}

void VulkanBackend::deallocate(void* p) noexcept {
    if (DryRunMemory::owns(p)) return dry_memory_.deallocate(p);
    // A copy's destination freed before anything waited for the copy (a buffer fetched ahead, then dropped): the
    // work that reuses the block must follow the copy.
    if (std::find(ahead_destinations_.begin(), ahead_destinations_.end(), p) != ahead_destinations_.end()) {
        try {
            wait_for_uploads_ahead();
        } catch (...) {
            try {
                synchronize();
            } catch (...) {
            }
        }
    }
    memory_->deallocate(p);
}

void VulkanBackend::wait_for_uploads_ahead() {
    if (!transfer_ || !transfer_->copies_unwaited()) return;
    require(!capturing_, ErrorKind::Unsupported, "vulkan: a wait for copies ahead inside a recorded call");
    transfer_->submit_batch();
    if (recorded_ > 0) flush();  // the work recorded so far (the block the copies overlap) does not wait
    transfer_->compute_waits();
    ahead_destinations_.clear();
    record_begin();
    transfer_->record_acquire(commands_);
    record_barrier();  // in the batch that waits: every later command follows the wait, whichever batch it is in
}

void VulkanBackend::download(void* dst, const void* src, int64_t bytes) {
    if (DryRunMemory::owns(src)) {  // a dry run's tensor reads as zeros
        if (bytes > 0) std::memset(dst, 0, size_t(bytes));
        return;
    }
    char* to = static_cast<char*>(dst);
    const char* from = static_cast<const char*>(src);
    submit_and_wait();  // the staging memory may hold uploads not yet copied
    while (bytes > 0) {
        const int64_t n = std::min(bytes, staging_bytes_);
        const VulkanMemory::Location where = memory_->locate(from);
        record_begin();
        VkBufferCopy region{where.offset, 0, VkDeviceSize(n)};
        api().vkCmdCopyBuffer(commands_, where.buffer, staging_, 1, &region);
        record_barrier();
        submit_and_wait();
        std::memcpy(to, staging_map_, static_cast<size_t>(n));
        from += n;
        to += n;
        bytes -= n;
    }
}

void VulkanBackend::copy(void* dst, const void* src, int64_t bytes) {
    if (bytes <= 0 || DryRunMemory::owns(dst) || DryRunMemory::owns(src)) return;
    const VulkanMemory::Location from = memory_->locate(src), to = memory_->locate(dst);
    record_begin();
    VkBufferCopy region{from.offset, to.offset, VkDeviceSize(bytes)};
    api().vkCmdCopyBuffer(target_, from.buffer, to.buffer, 1, &region);
    record_barrier();
}

void VulkanBackend::copy_strided(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t bytes,
                                 int64_t count) {
    if (bytes <= 0 || count <= 0 || DryRunMemory::owns(dst) || DryRunMemory::owns(src)) return;
    // One command with a region per run; the runs of one tensor lie in one buffer.
    const VulkanMemory::Location from = memory_->locate(src), to = memory_->locate(dst);
    std::vector<VkBufferCopy> regions(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i)
        regions[size_t(i)] = {from.offset + VkDeviceSize(i * src_pitch), to.offset + VkDeviceSize(i * dst_pitch),
                              VkDeviceSize(bytes)};
    record_begin();
    api().vkCmdCopyBuffer(target_, from.buffer, to.buffer, uint32_t(count), regions.data());
    record_barrier();
}

void VulkanBackend::convert(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) {
    require(supports(src_type) && supports(dst_type), ErrorKind::Unsupported,
            device_name(device()) + " cannot convert " + dtype_name(src_type) + " to " + dtype_name(dst_type));
    if (src_type == dst_type) return copy(dst, src, dtype_storage_bytes(src_type, n));
    if (DryRunMemory::owns(dst) || DryRunMemory::owns(src)) return;
    require(!is_block_quantized(dst_type), ErrorKind::Unsupported,
            device_name(device()) + " cannot quantize to " + dtype_name(dst_type) + " (quantize on the host)");
    require(n < (int64_t(1) << 32), ErrorKind::Unsupported, "vulkan: a tensor of 2^32 or more values");
    struct {
        uint64_t src, dst;
        uint32_t n, format;  // format: the block format's code in dequantize.comp (convert.comp ignores it)
    } p{reinterpret_cast<uint64_t>(src), reinterpret_cast<uint64_t>(dst), uint32_t(n), 0};
    const uint32_t groups = uint32_t(std::min<int64_t>((n + 255) / 256, 65535));
    if (is_block_quantized(src_type)) {
        require(n % dtype_block_values(src_type) == 0, ErrorKind::InvalidArgument,
                std::to_string(n) + " values are not whole " + dtype_name(src_type) + " blocks");
        constexpr DType kCodes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                                    DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q2_K, DType::Q3_K};
        p.format = uint32_t(std::find(std::begin(kCodes), std::end(kCodes), src_type) - std::begin(kCodes));
        // 8 values a 16-byte store: q8_0, and the k-quants (256-value blocks) with their sub-block's scale read once.
        const bool k_quant = dtype_block_values(src_type) == 256;
        if ((src_type == DType::Q8_0 || k_quant) && dst_type == DType::F16 && p.dst % 16 == 0) {
            p.n = uint32_t(n / 8);
            return dispatch(k_quant ? "dequantize_k_f16x8" : "dequantize_q8_f16x8", p,
                            uint32_t(std::min<int64_t>((p.n + 255) / 256, 65535)));
        }
        return dispatch(dst_type == DType::F32 ? "dequantize_f32" : "dequantize_f16", p, groups);
    }
    dispatch(src_type == DType::F32 ? "convert_f32_f16" : "convert_f16_f32", p, groups);
}

// A recorded call's command buffer, resubmitted after the stream's commands at each replay.
class VulkanBackend::RecordedCommands final : public ops::RecordedWork {
public:
    RecordedCommands(VulkanBackend& backend, VkCommandBuffer buffer) : backend_(backend), buffer_(buffer) {}
    ~RecordedCommands() override { api().vkFreeCommandBuffers(backend_.device_, backend_.pool_, 1, &buffer_); }
    void replay() override { backend_.submit_and_wait(buffer_); }
    VkCommandBuffer buffer() const { return buffer_; }

private:
    VulkanBackend& backend_;
    VkCommandBuffer buffer_;
};

Tensor VulkanBackend::run_recorded(const std::string& key, const std::vector<const Tensor*>& inputs,
                                   const RecordedFn& fn) {
    // The first call runs eagerly: it makes the pipelines and uploads what kernels keep (the embedding's
    // frequencies), which a recording cannot.
    return recorder_.run(key, inputs, fn);
}

void VulkanBackend::forget_recordings(const std::string& key_prefix) { recorder_.forget(key_prefix); }

// While a profiler wants GPU time per op, calls run eagerly so that each op writes its timestamps.
bool VulkanBackend::recording_enabled() const { return recording_enabled_ && !dry_ && !ops::device_spans_wanted(); }

void VulkanBackend::begin_recording() {
    submit_and_wait();
    const Api& a = api();
    VkCommandBufferAllocateInfo cb{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    cb.commandPool = pool_;
    cb.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    cb.commandBufferCount = 1;
    VkCommandBuffer buffer = VK_NULL_HANDLE;
    check(a.vkAllocateCommandBuffers(device_, &cb, &buffer), "vkAllocateCommandBuffers");
    VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    try {
        check(a.vkBeginCommandBuffer(buffer, &begin), "vkBeginCommandBuffer");
    } catch (...) {
        a.vkFreeCommandBuffers(device_, pool_, 1, &buffer);
        throw;
    }
    recording_buffer_ = target_ = buffer;
    capturing_ = true;
}

std::unique_ptr<ops::RecordedWork> VulkanBackend::end_recording() {
    std::unique_ptr<RecordedCommands> work;
    try {
        work = std::make_unique<RecordedCommands>(*this, recording_buffer_);  // frees the buffer if the end fails
    } catch (...) {
        abort_recording();
        throw;
    }
    recording_buffer_ = VK_NULL_HANDLE;
    capturing_ = false;
    target_ = commands_;
    check(api().vkEndCommandBuffer(work->buffer()), "vkEndCommandBuffer");
    return work;
}

void VulkanBackend::abort_recording() noexcept {
    const Api& a = api();
    capturing_ = false;
    target_ = commands_;
    a.vkEndCommandBuffer(recording_buffer_);
    a.vkFreeCommandBuffers(device_, pool_, 1, &recording_buffer_);
    recording_buffer_ = VK_NULL_HANDLE;
}

BackendFactory vulkan_backend_factory() {
    BackendFactory f;
    f.list = [](std::string* why) {
        std::vector<DeviceDescription> out;
        std::string reasons;
        const std::vector<PhysicalDevice> devices = physical_devices(&reasons);
        for (size_t i = 0; i < devices.size(); ++i) out.push_back(describe(devices[i], int(i), 0));
        if (why) *why = reasons.empty() || reasons.rfind("vulkan:", 0) == 0 ? reasons : "vulkan: " + reasons;
        return out;
    };
    f.create = [](int index) -> std::unique_ptr<Backend> {
        std::string why;
        const std::vector<PhysicalDevice> devices = physical_devices(&why);
        require(index >= 0 && index < int(devices.size()), ErrorKind::Unsupported,
                "device vulkan:" + std::to_string(index) + " is not there (" + std::to_string(devices.size()) +
                    " usable Vulkan device" + (devices.size() == 1 ? "" : "s") + (why.empty() ? "" : "; " + why) + ")");
        auto backend = std::make_unique<VulkanBackend>(devices[index], index);
        at_exit_before_drivers([] { release_backends(DeviceKind::Vulkan); });
        return backend;
    };
    return f;
}

}  // namespace kiln::vulkan
