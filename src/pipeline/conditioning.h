// Prompts to what the UNet is conditioned on: as diffusers' encode_prompt builds it, or, with AUTOMATIC1111's
// prompt syntax (prompt_encoding.h), as the webui does, changing with the model call where the prompt edits.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/model.h"
#include "pipeline/prompt_encoding.h"

namespace kiln {

struct Conditioning {
    Tensor context;      // [B, 77 x chunks, cross_attention_dim]
    Tensor text_embeds;  // SDXL pooled [B, pooled]; empty otherwise
    Tensor time_ids;     // SDXL [B, 6]; empty otherwise
};

// What one model call is conditioned on. With guidance, `joint` holds the rows [negative, positive] when
// both prompts have as many chunks; otherwise `joint` holds the positive alone and `negative` the
// negative, and the UNet runs on each apart, as the webui does when their lengths differ (its option
// "pad_cond_uncond", off by default, would pad instead and change the result).
struct CallConditioning {
    Conditioning joint;
    std::optional<Conditioning> negative;
};

// The conditioning of every model call of one sampling pass.
struct ConditioningSchedule {
    std::vector<CallConditioning> parts;  // one per distinct pair of negative and positive schedule entries
    // The part for model call `call` (0 = the pass's first), as the webui's CFGDenoiser picks it: its
    // call counter against each prompt's schedule, the first entry whose end step is >= the counter (and
    // the first entry when none is: reconstruct_cond_batch).
    size_t part_for_call(int call) const;

    std::vector<int> negative_ends, positive_ends;  // the schedules' end steps (negative: empty without guidance)
    std::vector<size_t> part_of_pair;               // [negative index x positive count + positive index]
};

// Batch [negative, positive] when `with_negative`, else [positive]; an absent SDXL negative prompt is zeros
// (force_zeros_for_empty_prompt). With AUTOMATIC1111's syntax, "<lora:...>" tags leave the prompt as in the
// webui, each reported through `notice` (no LoRA yet); the negative's are words there, also reported.
ConditioningSchedule encode_conditioning_schedule(const StableDiffusionModel& model, const std::string& prompt,
                                                  const std::optional<std::string>& negative, bool with_negative,
                                                  const PromptEncodingOptions& options, int width, int height,
                                                  const std::function<void(const std::string&)>& notice = {});

// diffusers' conditioning (PromptSyntax::Plain), for a pipeline without prompt editing.
Conditioning encode_conditioning(const StableDiffusionModel& model, const std::string& prompt,
                                 const std::optional<std::string>& negative, bool with_negative, int clip_skip,
                                 int width, int height);

// Rows of two [B, ...] tensors of the same trailing shape, concatenated along the batch.
Tensor concat_batch(const Tensor& a, const Tensor& b);

}  // namespace kiln
