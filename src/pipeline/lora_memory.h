// What merging LoRA files adds to a model's memory, from their headers (docs/LORA.md): for `kiln plan`.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/model.h"

namespace kiln {

struct LoraMergeEstimate {
    int modules = 0;                         // weights merged into, each once
    int64_t merged_bytes = 0;                // heap bytes beyond the unmerged weights'
    int64_t text_pages = 0, unet_pages = 0;  // the mapped pages the copies replace
    bool empty() const { return modules == 0; }
    std::string describe() const;
};

// For `model` loaded without `loras` or --weights (CPU: float32 copies for views, stacks widened to float32; GPU:
// `modules` only, merged weights take the device's dtype). A module that matches no view counts as stacked.
LoraMergeEstimate estimate_lora_merge(const StableDiffusionModel& model, const std::vector<LoraApplication>& loras);

}  // namespace kiln
