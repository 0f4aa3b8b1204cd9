#include "backends/vulkan/vulkan_command_ring.h"

#include <string>

namespace kiln::vulkan {

void CommandRing::to_spares(VkCommandBuffer commands) {
    check(api().vkResetCommandBuffer(commands, 0), std::string("vkResetCommandBuffer") + what_);
    spare_.push_back(commands);
}

VkCommandBuffer CommandRing::next(uint64_t reached) {
    for (auto it = in_flight_.begin(); it != in_flight_.end();) {
        if (it->value > reached) {
            ++it;
            continue;
        }
        to_spares(it->commands);
        it = in_flight_.erase(it);
    }
    VkCommandBuffer commands = VK_NULL_HANDLE;
    if (!spare_.empty()) {
        commands = spare_.back();
        spare_.pop_back();
        return commands;
    }
    VkCommandBufferAllocateInfo info{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    info.commandPool = pool_;
    info.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    info.commandBufferCount = 1;
    check(api().vkAllocateCommandBuffers(device_, &info, &commands), std::string("vkAllocateCommandBuffers") + what_);
    return commands;
}

void CommandRing::all_done() {
    for (const Submitted& s : in_flight_) to_spares(s.commands);
    in_flight_.clear();
}

}  // namespace kiln::vulkan
