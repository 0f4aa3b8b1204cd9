// Command buffers of one pool used again once the device has finished them: each submitted buffer is kept with
// the timeline value its submission signals, and goes back to the spares (reset) when the timeline has passed it
// or after a full wait. The backend's compute stream and the transfer queue's copies each keep one.
#pragma once
#include <cstdint>
#include <vector>

#include "backends/vulkan/vulkan_api.h"

namespace kiln::vulkan {

class CommandRing {
public:
    // `what` names the queue in the error of a failed call ("" for the compute stream).
    CommandRing(VkDevice device, VkCommandPool pool, const char* what) : device_(device), pool_(pool), what_(what) {}
    // A reset buffer: a spare, one whose submission's value `reached` has passed, or a new one from the pool.
    VkCommandBuffer next(uint64_t reached);
    void submitted(VkCommandBuffer commands, uint64_t value) { in_flight_.push_back({commands, value}); }
    void all_done();  // after the host waited for everything: every buffer in flight back to the spares
    bool busy() const { return !in_flight_.empty(); }

private:
    void to_spares(VkCommandBuffer commands);
    VkDevice device_;
    VkCommandPool pool_;  // its owner destroys it, and with it the buffers
    const char* what_;
    struct Submitted {
        VkCommandBuffer commands;
        uint64_t value;
    };
    std::vector<Submitted> in_flight_;
    std::vector<VkCommandBuffer> spare_;
};

}  // namespace kiln::vulkan
