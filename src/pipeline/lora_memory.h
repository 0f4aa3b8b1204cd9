// What merging LoRA files into a model's weights adds to its memory (docs/LORA.md), estimated from the files'
// headers (which modules they change, and how many values each change has) without reading their tensors: for
// `kiln plan`, which loads the model without merging. A generation's model, loaded with its LoRA, already holds
// the merged copies: the CPU plan's measured fixed part counts them, and its weights' pages leave them out.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/model.h"

namespace kiln {

struct LoraMergeEstimate {
    int modules = 0;           // weights merged into, each once however many files change it
    int64_t merged_bytes = 0;  // host memory the merged weights hold beyond what the same weights held unmerged,
                               // outside the mapped file: resident whatever the stage (the CPU plan's fixed part)
    int64_t text_pages = 0;    // mapped pages of the text encoders' weights that merged copies replace
    int64_t unet_pages = 0;    // and of the UNet's
    bool empty() const { return modules == 0; }
    std::string describe() const;  // one line for kiln plan
};

// For `model` loaded without `loras` (and without --weights). On the CPU a merged matrix is a float32 copy (kept
// in float32, as diffusers fuses): where the unmerged one was a view of the mapped file, the copy's 4 bytes a
// value replace its pages; where kiln stacks matrices into one (a self-attention's q|k|v, the cross-attentions'
// k|v, the time projections; never views), the stack is widened from the file's precision to float32, so each
// merged one adds 4 less that precision's bytes a value (a stack's matrices the files leave unchanged widen too,
// and are not counted). On a GPU the merged weights take the device's dtype as the others do: nothing changes
// there (the float32 copy is the host's, one weight at a time while it loads), so only the modules are counted.
// A module that matches no weight of the model is counted as a stacked one (the load skips it with a notice).
// IO or InvalidModel for a file that cannot be read as safetensors or a PyTorch checkpoint.
LoraMergeEstimate estimate_lora_merge(const StableDiffusionModel& model, const std::vector<LoraApplication>& loras);

}  // namespace kiln
