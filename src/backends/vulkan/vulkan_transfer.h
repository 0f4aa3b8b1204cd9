// Copies ahead of use on a queue of their own (Backend::upload_ahead: a streamed UNet block's weights copied from
// host memory while the block before computes), as the CUDA backend's copy stream does. The copies are recorded
// into command buffers of their own and submitted on a transfer queue, ordered by two timeline semaphores:
// - each copy batch waits for the compute work submitted before it (its destination was just allocated, and the
//   allocator hands out memory in the compute stream's order: work queued earlier may still read what it held);
// - the compute work after wait_for_uploads_ahead waits for the copies, and a barrier in that batch orders
//   everything after it.
// Where the transfer queue is of another family than the compute queue, each copied range is released by the
// transfer family and acquired by the compute family (the source, host memory, is shared by both families).
// The backend submits its compute work through compute_submit(), which adds these waits and signals.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backends/vulkan/vulkan_api.h"
#include "backends/vulkan/vulkan_command_ring.h"

namespace kiln::vulkan {

// Which queue the copies ahead run on: a queue family for transfers only (NVIDIA's and AMD's drivers have one:
// the DMA engines), a second queue of the compute family, or the compute queue itself (lavapipe has only that
// one; copies there are ordered after the compute work before them and overlap nothing, but stay correct).
// Auto: the first of these the device has.
enum class TransferQueue { Auto, Family, Second, Same };
const char* transfer_queue_name(TransferQueue q);  // "family", "second", "same", "auto"

// KILN_VULKAN_UPLOAD_AHEAD: unset, "" or "1" copies streamed weights ahead, "0" in line (upload_async); another
// value is an InvalidArgument naming the setting, as CUDA's KILN_CUDA_UPLOAD_AHEAD.
bool upload_ahead_from_env(const char* value);
// KILN_VULKAN_TRANSFER_QUEUE: unset or "" Auto, else "family", "second" or "same"; another value InvalidArgument.
TransferQueue transfer_queue_from_env(const char* value);

// What a device offers for copies ahead; the backend makes its device with these queues.
struct TransferQueues {
    uint32_t compute_family = 0;
    int64_t family = -1;          // a family with transfers and neither compute nor graphics; -1: none
    uint32_t compute_queues = 1;  // queues made of the compute family: 2 where it has them (the second for copies)
    bool timelines = false;       // timeline semaphores (Vulkan 1.2 core; without them copies stay in line)
    // `want`, or where the device lacks it the next one down (Family, Second, Same).
    TransferQueue resolve(TransferQueue want) const;
};
TransferQueues transfer_queues(VkPhysicalDevice device, uint32_t compute_family);

class VulkanTransfer {
public:
    VulkanTransfer(VkDevice device, const TransferQueues& queues, TransferQueue kind);
    ~VulkanTransfer();  // the device must be idle (the backend waits first)
    VulkanTransfer(const VulkanTransfer&) = delete;
    VulkanTransfer& operator=(const VulkanTransfer&) = delete;

    TransferQueue kind() const { return kind_; }

    // Records a copy into the open batch (opened on demand). The batch waits for every compute submission made
    // so far: the backend submits its recorded work first where it has any (compute_has_work).
    void copy(VkBuffer src, VkDeviceSize src_offset, VkBuffer dst, VkDeviceSize dst_offset, VkDeviceSize bytes);
    bool batch_open() const { return open_ != VK_NULL_HANDLE; }
    void submit_batch();  // starts the open batch's copies (nothing where none is open)
    // Copies submitted or open that no compute submission has been made to wait for.
    bool copies_unwaited() const { return open_ != VK_NULL_HANDLE || copied_value_ > waited_; }
    // The next compute submission waits for every copy so far. Call after submitting the compute work that must
    // not wait, then record_acquire and a barrier into the batch that waits.
    void compute_waits();
    bool compute_wait_pending() const { return compute_wait_ != 0; }
    // Across families: the acquire of the ranges copied since the last call, recorded into `cmd` (compute queue).
    void record_acquire(VkCommandBuffer cmd);

    // Adds this module's waits and signal to a compute submission; returns the compute timeline's value it will
    // signal. `submit` must stay unchanged until vkQueueSubmit has returned.
    uint64_t compute_submit(VkSubmitInfo& submit);
    // The last compute value the device has reached (the backend recycles its command buffers by it).
    uint64_t compute_reached() const;
    // The host waited for everything submitted (the compute queue's fence after a wait for the copies): every
    // batch can be recorded again.
    void all_done();

private:
    VkCommandBuffer fresh_buffer();

    VkDevice device_;
    TransferQueue kind_;
    uint32_t family_, compute_family_;
    VkQueue queue_ = VK_NULL_HANDLE;
    VkCommandPool pool_ = VK_NULL_HANDLE;
    VkSemaphore computed_ = VK_NULL_HANDLE;  // timeline: compute submissions signal 1, 2, ...
    VkSemaphore copied_ = VK_NULL_HANDLE;    // timeline: copy batches signal 1, 2, ...
    uint64_t compute_value_ = 0, copied_value_ = 0;
    uint64_t waited_ = 0;        // the copies value compute submissions have been made to wait for
    uint64_t compute_wait_ = 0;  // the copies value the next compute submission waits for (0: none)
    VkCommandBuffer open_ = VK_NULL_HANDLE;
    uint64_t open_after_ = 0;  // the compute value the open batch waits for
    std::vector<VkBufferMemoryBarrier> released_;  // the open batch's ranges (across families only)
    std::vector<VkBufferMemoryBarrier> to_acquire_;  // submitted ranges the compute family has not acquired
    std::unique_ptr<CommandRing> ring_;  // the copy batches' buffers, by the copies value each signals
    // compute_submit's semaphore arrays (they must outlive the call that fills the submission).
    VkTimelineSemaphoreSubmitInfo timeline_info_{};
    uint64_t wait_value_ = 0, signal_value_ = 0;
    VkPipelineStageFlags wait_stage_ = 0;
};

}  // namespace kiln::vulkan
