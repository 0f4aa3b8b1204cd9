#include "backends/vulkan/vulkan_timeline.h"

#include <chrono>

#include "ops/op_observer.h"

namespace kiln::vulkan {

VulkanTimeline::VulkanTimeline(VkDevice device, std::string device_name, float period_ns, uint32_t valid_bits,
                               std::function<void()> flush)
    : device_(device),
      device_name_(std::move(device_name)),
      period_ns_(period_ns),
      mask_(valid_bits >= 64 ? ~uint64_t(0) : (uint64_t(1) << valid_bits) - 1),
      flush_(std::move(flush)) {
    if (valid_bits == 0 || period_ns <= 0) return;  // no timestamps on this queue: no spans
    VkQueryPoolCreateInfo info{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    info.queryType = VK_QUERY_TYPE_TIMESTAMP;
    info.queryCount = kQueries;
    if (api().vkCreateQueryPool(device_, &info, nullptr, &pool_) != VK_SUCCESS) pool_ = VK_NULL_HANDLE;
}

VulkanTimeline::~VulkanTimeline() {
    if (pool_ != VK_NULL_HANDLE) api().vkDestroyQueryPool(device_, pool_, nullptr);
}

uint32_t VulkanTimeline::write(VkCommandBuffer cmd) {
    const Api& a = api();
    if (next_ == 0) a.vkCmdResetQueryPool(cmd, pool_, 0, kQueries);
    a.vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool_, next_);
    return next_++;
}

void VulkanTimeline::begin(VkCommandBuffer cmd, ops::OpKind kind, double flops) {
    if (!available()) return;
    // Two queries per call; a full pool is read back between ops (it cannot be inside one: then the call's
    // start would be lost, so that call is left untimed).
    if (next_ + 2 > kQueries) {
        if (!open_.empty()) {
            open_.push_back(-1);  // untimed; end() pops it
            return;
        }
        flush_();
    }
    Call c;
    c.kind = kind, c.flops = flops, c.depth = int(open_.size()), c.parent = open_.empty() ? -1 : open_.back();
    if (c.parent < 0 && !open_.empty()) c.depth = 0;  // inside an untimed call: reported at the top
    c.start = write(cmd);
    c.end = UINT32_MAX;
    open_.push_back(int(calls_.size()));
    calls_.push_back(c);
}

void VulkanTimeline::end(VkCommandBuffer cmd) noexcept {
    if (!available() || open_.empty()) return;
    const int i = open_.back();
    open_.pop_back();
    if (i >= 0 && next_ < kQueries) calls_[size_t(i)].end = write(cmd);
}

void VulkanTimeline::synchronized() {
    // Calls still open span the wait (an op that reads back inside): read them with the rest later.
    if (!available() || next_ == 0 || !open_.empty()) return;
    const int64_t host_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::steady_clock::now().time_since_epoch())
                                .count();
    std::vector<uint64_t> ticks(next_);
    const VkResult r = api().vkGetQueryPoolResults(device_, pool_, 0, next_, ticks.size() * sizeof(uint64_t),
                                                   ticks.data(), sizeof(uint64_t), VK_QUERY_RESULT_64_BIT);
    std::vector<Call> calls;
    calls.swap(calls_);
    next_ = 0;
    if (r != VK_SUCCESS) return;
    uint64_t last = 0, first = UINT64_MAX;
    for (uint64_t& t : ticks) {
        t &= mask_;
        last = std::max(last, t), first = std::min(first, t);
    }
    const int64_t anchor_ns = host_ns - int64_t(double(last - first) * period_ns_);
    std::vector<ops::TimedCall> timed;
    for (const Call& c : calls) {
        if (c.end == UINT32_MAX) continue;
        ops::TimedCall t;
        t.kind = c.kind, t.depth = c.depth, t.flops = c.flops;
        t.parent = c.parent;  // indices into calls; every call here ended, and parents end after children
        t.start_ms = double(ticks[c.start] - first) * period_ns_ * 1e-6;
        t.end_ms = double(ticks[c.end] - first) * period_ns_ * 1e-6;
        timed.push_back(t);
    }
    if (timed.size() != calls.size()) return;  // a call lost its end (full pool): its parent links would be off
    if (ops::OpObserver* o = ops::op_observer(); o && o->wants_device_spans())
        o->device_spans(device_name_, ops::resolve_device_spans(timed, anchor_ns));
}

}  // namespace kiln::vulkan
