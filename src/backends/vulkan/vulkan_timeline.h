// GPU time per op on the Vulkan backend, for a profiler (ops/op_observer.h), as the CUDA backend's
// GpuTimeline does with events: while a profiler wants device spans, each op writes a timestamp into the
// stream's command buffer before and after its kernels (vkCmdWriteTimestamp after the barrier that orders
// it behind the previous op, so the start is when the previous op's work is done). Nothing waits for the GPU
// because of it: the timestamps are read back where the host waits anyway (submit_and_wait) and reported
// then, each call's host time placed by the last timestamp's, which is taken to be the moment of the wait.
//
// Timestamps come from one query pool, reset inside the command buffer at its first use after a read-back.
// When it is full between ops the backend waits once and reads it back. Recorded calls (run_recorded) run
// eagerly while spans are wanted, so every op of them is timed. A device whose compute queue has no
// timestamps (timestampValidBits 0) reports none.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backends/vulkan/vulkan_api.h"
#include "ops/device_spans.h"
#include "ops/op_list.h"

namespace kiln::vulkan {

class VulkanTimeline {
public:
    static constexpr uint32_t kQueries = 8192;  // 4096 op calls between waits (an SD 1.5 UNet call has ~1100)

    // device: "vulkan:0", as profiles name it; period_ns: VkPhysicalDeviceLimits::timestampPeriod; valid_bits:
    // the queue family's timestampValidBits; flush: the backend's submit_and_wait, for a full pool.
    VulkanTimeline(VkDevice device, std::string device_name, float period_ns, uint32_t valid_bits,
                   std::function<void()> flush);
    ~VulkanTimeline();
    VulkanTimeline(const VulkanTimeline&) = delete;
    VulkanTimeline& operator=(const VulkanTimeline&) = delete;

    bool available() const { return pool_ != VK_NULL_HANDLE; }
    // Around one op's kernels, recorded into cmd (the stream's buffer), when ops::device_spans_wanted().
    void begin(VkCommandBuffer cmd, ops::OpKind kind, double flops);
    void end(VkCommandBuffer cmd) noexcept;
    // The host has just waited for everything submitted: read back the finished calls and report them.
    void synchronized();

private:
    struct Call {
        ops::OpKind kind = ops::OpKind::Linear;
        int depth = 0, parent = -1;
        double flops = 0;
        uint32_t start = 0, end = 0;  // query indices; end stays UINT32_MAX until the call ends
    };
    uint32_t write(VkCommandBuffer cmd);

    VkDevice device_;
    std::string device_name_;
    double period_ns_;
    uint64_t mask_;
    std::function<void()> flush_;
    VkQueryPool pool_ = VK_NULL_HANDLE;
    uint32_t next_ = 0;          // queries written since the last reset
    std::vector<Call> calls_;    // since the last read-back, in stream order
    std::vector<int> open_;      // indices of calls begun and not ended, innermost last
};

}  // namespace kiln::vulkan
