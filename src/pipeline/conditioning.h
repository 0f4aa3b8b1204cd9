// Prompts to what the UNet is conditioned on, as diffusers' encode_prompt builds it.
#pragma once
#include <optional>
#include <string>

#include "core/tensor.h"
#include "models/model.h"

namespace kiln {

struct Conditioning {
    Tensor context;      // [B, 77, cross_attention_dim]
    Tensor text_embeds;  // SDXL pooled [B, pooled]; empty otherwise
    Tensor time_ids;     // SDXL [B, 6]; empty otherwise
};

// Batch [negative, positive] when `with_negative` (classifier-free guidance), else [positive].
Conditioning encode_conditioning(const StableDiffusionModel& model, const std::string& prompt,
                                 const std::optional<std::string>& negative, bool with_negative, int clip_skip,
                                 int width, int height);

}  // namespace kiln
