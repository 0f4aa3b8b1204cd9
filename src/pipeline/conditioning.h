// Prompts to what the UNet is conditioned on: as diffusers' encode_prompt builds it, or, with AUTOMATIC1111's
// prompt syntax (prompt_encoding.h), as the webui does, changing with the model call where the prompt edits.
#pragma once
#include <functional>
#include <map>
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

// What one model call is conditioned on. With guidance, `joint` holds the rows [negative, part 1, ..., part K]
// (K: the prompt's AND parts, one for a plain prompt) when the negative has as many tokens as the parts;
// otherwise `joint` holds the parts alone and `negative` the negative, and the UNet runs on each apart, as the
// webui does when their lengths differ (its option "pad_cond_uncond", off by default, would pad instead and
// change the result). Parts of different lengths are padded to the longest with copies of their last token's
// row, as the webui's stack_conds (modules/prompt_parser.py) does.
struct CallConditioning {
    Conditioning joint;
    std::optional<Conditioning> negative;
};

// The conditioning of every model call of one sampling pass.
struct ConditioningSchedule {
    std::vector<CallConditioning> parts;  // one per distinct combination of the prompts' schedule entries
    // The part for model call `call` (0 = the pass's first), as the webui's CFGDenoiser picks it: its
    // call counter against each prompt's schedule, the first entry whose end step is >= the counter (and
    // the first entry when none is: reconstruct_cond_batch).
    size_t part_for_call(int call) const;

    // Whether the calls have the negative's rows and are guided (combine_composable_guidance): with guidance,
    // and always for a prompt with AND parts or a weight, which the webui guides at any scale.
    bool guided = false;
    std::vector<double> and_weights;                // the weight of each AND part of the prompt (text/composable_prompt.h)
    std::vector<int> negative_ends;                 // its schedule's end steps (empty without a negative)
    std::vector<std::vector<int>> positive_ends;    // per AND part, its schedule's end steps
    std::map<std::vector<size_t>, size_t> part_of;  // [negative entry, each AND part's entry] -> index in `parts`

    // [negative entry (0 without one), each AND part's entry] at model call `call`.
    std::vector<size_t> entries_for(int call) const;
};

// An image's rows in a UNet call, from the prompt alone (for the memory plans): its AND parts, and the negative's
// where guided, as encode_conditioning_schedule makes them (a negative of another length runs apart: one fewer).
int unet_rows_per_image(const std::string& prompt, PromptSyntax syntax, bool with_negative);

// Batch [negative, positive] when `with_negative`, else [positive]; an absent SDXL negative prompt is zeros
// (force_zeros_for_empty_prompt). With AUTOMATIC1111's syntax, "<lora:...>" tags leave the prompt as in the
// webui (a tag of a LoRA the model was not loaded with is an error; others are reported through `notice`;
// the negative's are words there, also reported), and the prompt is then split at AND into weighted parts,
// each with its own schedule; the negative prompt is not split. A part whose weight is not finite is
// InvalidArgument.
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
