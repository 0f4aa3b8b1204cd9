// --vram SIZE|auto: the cap on what kiln holds of a GPU (Backend::set_memory_limit). auto: the device's free
// memory plus what kiln holds, less max(512 MiB, 10% of the device) (docs/MEMORY.md says why).
#pragma once
#include <string>

#include "core/backend.h"

namespace kiln {

struct VramBudget {
    int64_t bytes = 0;
    bool automatic = false;
    int64_t available = 0, margin = 0;  // auto's figures
    std::string describe(const std::string& device) const;  // "--vram auto: 1536 MiB (2048 MiB available ...)"
};

int64_t vram_auto_margin(int64_t total_bytes);
// OutOfMemory naming the figures when the margin leaves nothing.
VramBudget vram_auto_budget(int64_t free_bytes, int64_t held_bytes, int64_t total_bytes, const std::string& device);
// "auto" from the backend's figures, else a size (parse_byte_size).
VramBudget resolve_vram_budget(const std::string& text, Backend& backend);

}  // namespace kiln
