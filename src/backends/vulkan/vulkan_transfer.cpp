#include "backends/vulkan/vulkan_transfer.h"

#include <cstring>
#include <string>

#include "kiln/error.h"

namespace kiln::vulkan {

namespace {

constexpr VkPipelineStageFlags kComputeStages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;

VkSemaphore timeline_semaphore(VkDevice device) {
    VkSemaphoreTypeCreateInfo type{VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO};
    type.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
    VkSemaphoreCreateInfo info{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
    info.pNext = &type;
    VkSemaphore s = VK_NULL_HANDLE;
    check(api().vkCreateSemaphore(device, &info, nullptr, &s), "vkCreateSemaphore (timeline)");
    return s;
}

}  // namespace

const char* transfer_queue_name(TransferQueue q) {
    switch (q) {
    case TransferQueue::Family: return "family";
    case TransferQueue::Second: return "second";
    case TransferQueue::Same: return "same";
    case TransferQueue::Auto: break;
    }
    return "auto";
}

bool upload_ahead_from_env(const char* value) {
    if (!value || !*value || std::strcmp(value, "1") == 0) return true;
    if (std::strcmp(value, "0") == 0) return false;
    fail(ErrorKind::InvalidArgument, std::string("KILN_VULKAN_UPLOAD_AHEAD=") + value +
                                         ": 1 copies streamed weights ahead (the default), 0 in line");
}

TransferQueue transfer_queue_from_env(const char* value) {
    const std::string v = value ? value : "";
    if (v.empty()) return TransferQueue::Auto;
    for (TransferQueue q : {TransferQueue::Family, TransferQueue::Second, TransferQueue::Same})
        if (v == transfer_queue_name(q)) return q;
    fail(ErrorKind::InvalidArgument, "KILN_VULKAN_TRANSFER_QUEUE=" + v +
                                         ": expected family (a transfer-only queue family), second (a second "
                                         "compute queue) or same (the compute queue)");
}

TransferQueue TransferQueues::resolve(TransferQueue want) const {
    if ((want == TransferQueue::Auto || want == TransferQueue::Family) && family >= 0) return TransferQueue::Family;
    if (want != TransferQueue::Same && compute_queues > 1) return TransferQueue::Second;
    return TransferQueue::Same;
}

TransferQueues transfer_queues(VkPhysicalDevice device, uint32_t compute_family) {
    const Api& a = api();
    TransferQueues q;
    q.compute_family = compute_family;
    uint32_t count = 0;
    a.vkGetPhysicalDeviceQueueFamilyProperties(device, &count, nullptr);
    std::vector<VkQueueFamilyProperties> families(count);
    a.vkGetPhysicalDeviceQueueFamilyProperties(device, &count, families.data());
    for (uint32_t i = 0; i < count && q.family < 0; ++i) {
        const VkQueueFlags f = families[i].queueFlags;
        if (i != compute_family && (f & VK_QUEUE_TRANSFER_BIT) && !(f & (VK_QUEUE_COMPUTE_BIT | VK_QUEUE_GRAPHICS_BIT)) &&
            families[i].queueCount > 0)
            q.family = i;
    }
    if (compute_family < count && families[compute_family].queueCount > 1) q.compute_queues = 2;
    VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    features.pNext = &f12;
    a.vkGetPhysicalDeviceFeatures2(device, &features);
    q.timelines = f12.timelineSemaphore == VK_TRUE;
    return q;
}

VulkanTransfer::VulkanTransfer(VkDevice device, const TransferQueues& queues, TransferQueue kind)
    : device_(device), kind_(queues.resolve(kind)), compute_family_(queues.compute_family) {
    const Api& a = api();
    family_ = kind_ == TransferQueue::Family ? uint32_t(queues.family) : compute_family_;
    a.vkGetDeviceQueue(device_, family_, kind_ == TransferQueue::Second ? 1 : 0, &queue_);
    VkCommandPoolCreateInfo pool{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pool.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT | VK_COMMAND_POOL_CREATE_TRANSIENT_BIT;
    pool.queueFamilyIndex = family_;
    check(a.vkCreateCommandPool(device_, &pool, nullptr, &pool_), "vkCreateCommandPool (transfers)");
    try {
        computed_ = timeline_semaphore(device_);
        copied_ = timeline_semaphore(device_);
    } catch (...) {
        if (computed_) a.vkDestroySemaphore(device_, computed_, nullptr);
        a.vkDestroyCommandPool(device_, pool_, nullptr);
        throw;
    }
    ring_ = std::make_unique<CommandRing>(device_, pool_, " (transfers)");
}

VulkanTransfer::~VulkanTransfer() {
    const Api& a = api();
    if (open_) a.vkEndCommandBuffer(open_);  // never submitted: dropped with the pool
    a.vkDestroySemaphore(device_, computed_, nullptr);
    a.vkDestroySemaphore(device_, copied_, nullptr);
    a.vkDestroyCommandPool(device_, pool_, nullptr);  // frees its command buffers
}

VkCommandBuffer VulkanTransfer::fresh_buffer() {
    uint64_t reached = 0;
    if (ring_->busy()) check(api().vkGetSemaphoreCounterValue(device_, copied_, &reached), "vkGetSemaphoreCounterValue");
    return ring_->next(reached);
}

void VulkanTransfer::copy(VkBuffer src, VkDeviceSize src_offset, VkBuffer dst, VkDeviceSize dst_offset,
                          VkDeviceSize bytes) {
    const Api& a = api();
    if (!open_) {
        VkCommandBuffer cmd = fresh_buffer();
        VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
        begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
        check(a.vkBeginCommandBuffer(cmd, &begin), "vkBeginCommandBuffer (transfers)");
        open_ = cmd;
    }
    open_after_ = compute_value_;  // every compute submission so far (the backend submitted what it had)
    VkBufferCopy region{src_offset, dst_offset, bytes};
    a.vkCmdCopyBuffer(open_, src, dst, 1, &region);
    if (family_ != compute_family_) {
        VkBufferMemoryBarrier b{VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER};
        b.srcQueueFamilyIndex = family_;
        b.dstQueueFamilyIndex = compute_family_;
        b.buffer = dst;
        b.offset = dst_offset;
        b.size = bytes;
        released_.push_back(b);
    }
}

void VulkanTransfer::submit_batch() {
    if (!open_) return;
    const Api& a = api();
    VkCommandBuffer cmd = open_;
    open_ = VK_NULL_HANDLE;  // a failure below leaves no half-submitted batch open
    if (!released_.empty()) {
        // The release half of each range's ownership transfer: after the copies, to the compute family.
        for (VkBufferMemoryBarrier& b : released_) b.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
        a.vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, 0, 0, nullptr,
                               uint32_t(released_.size()), released_.data(), 0, nullptr);
        to_acquire_.insert(to_acquire_.end(), released_.begin(), released_.end());
        released_.clear();
    }
    check(a.vkEndCommandBuffer(cmd), "vkEndCommandBuffer (transfers)");
    const uint64_t wait = open_after_, signal = copied_value_ + 1;
    VkTimelineSemaphoreSubmitInfo values{VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
    values.waitSemaphoreValueCount = wait > 0 ? 1 : 0;
    values.pWaitSemaphoreValues = &wait;
    values.signalSemaphoreValueCount = 1;
    values.pSignalSemaphoreValues = &signal;
    const VkPipelineStageFlags stage = VK_PIPELINE_STAGE_TRANSFER_BIT;
    VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    submit.pNext = &values;
    submit.waitSemaphoreCount = wait > 0 ? 1 : 0;
    submit.pWaitSemaphores = &computed_;
    submit.pWaitDstStageMask = &stage;
    submit.commandBufferCount = 1;
    submit.pCommandBuffers = &cmd;
    submit.signalSemaphoreCount = 1;
    submit.pSignalSemaphores = &copied_;
    check(a.vkQueueSubmit(queue_, 1, &submit, VK_NULL_HANDLE), "vkQueueSubmit (transfers)");
    copied_value_ = signal;
    ring_->submitted(cmd, signal);
}

void VulkanTransfer::compute_waits() {
    submit_batch();
    if (copied_value_ > waited_) compute_wait_ = waited_ = copied_value_;
}

void VulkanTransfer::record_acquire(VkCommandBuffer cmd) {
    if (to_acquire_.empty()) return;
    // The acquire half: its first stages are those the semaphore wait holds, so it follows the copies.
    for (VkBufferMemoryBarrier& b : to_acquire_) {
        b.srcAccessMask = 0;
        b.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT;
    }
    api().vkCmdPipelineBarrier(cmd, kComputeStages, kComputeStages, 0, 0, nullptr, uint32_t(to_acquire_.size()),
                               to_acquire_.data(), 0, nullptr);
    to_acquire_.clear();
}

uint64_t VulkanTransfer::compute_submit(VkSubmitInfo& submit) {
    wait_value_ = compute_wait_;
    signal_value_ = compute_value_ + 1;
    wait_stage_ = kComputeStages;
    timeline_info_ = {VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
    timeline_info_.waitSemaphoreValueCount = wait_value_ > 0 ? 1 : 0;
    timeline_info_.pWaitSemaphoreValues = &wait_value_;
    timeline_info_.signalSemaphoreValueCount = 1;
    timeline_info_.pSignalSemaphoreValues = &signal_value_;
    submit.pNext = &timeline_info_;
    submit.waitSemaphoreCount = wait_value_ > 0 ? 1 : 0;
    submit.pWaitSemaphores = &copied_;
    submit.pWaitDstStageMask = &wait_stage_;
    submit.signalSemaphoreCount = 1;
    submit.pSignalSemaphores = &computed_;
    // Counted as made: a submission that fails leaves the device lost, and nothing waits for it again.
    compute_value_ = signal_value_;
    compute_wait_ = 0;
    return signal_value_;
}

uint64_t VulkanTransfer::compute_reached() const {
    uint64_t v = 0;
    check(api().vkGetSemaphoreCounterValue(device_, computed_, &v), "vkGetSemaphoreCounterValue");
    return v;
}

void VulkanTransfer::all_done() { ring_->all_done(); }

}  // namespace kiln::vulkan
