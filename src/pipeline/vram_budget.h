// --vram SIZE|auto: the bound on what kiln holds of a GPU's memory (Backend::set_memory_limit). `auto` is the
// memory the device has free for kiln when the run starts less a margin:
//   margin = max(512 MiB, 10% of the device's memory)
// The 512 MiB cover what the driver and libraries take outside kiln's allocator after the budget is read
// (CUDA's cuBLASLt and cuDNN workspaces and loaded kernels, Vulkan's pipelines and command buffers: 600-1000 MiB
// above the allocator on an H200, the context's share of it already gone from the free figure); the 10% leave
// room for other programs on the same GPU (a desktop's compositor, a browser) to grow during a run.
#pragma once
#include <cstdint>
#include <string>

#include "core/backend.h"

namespace kiln {

struct VramBudget {
    int64_t bytes = 0;      // the cap
    bool automatic = false; // from --vram auto
    int64_t available = 0;  // auto: the device's free memory plus what kiln already holds of it
    int64_t margin = 0;     // auto: what was left out
    // "--vram auto: 3584 MiB (4096 MiB available on vulkan:0 less a margin of 512 MiB)", "--vram 3072 MiB".
    std::string describe(const std::string& device) const;
};

int64_t vram_auto_margin(int64_t total_bytes);

// auto's budget from the device's figures; OutOfMemory naming them when the margin leaves nothing.
VramBudget vram_auto_budget(int64_t free_bytes, int64_t held_bytes, int64_t total_bytes, const std::string& device);

// "auto" (from the backend's memory_info and reserved_bytes) or a size (parse_byte_size's forms).
VramBudget resolve_vram_budget(const std::string& text, Backend& backend);

}  // namespace kiln
