// Prompts to text-encoder outputs as AUTOMATIC1111's webui makes them (modules/sd_hijack_clip.py,
// modules/sd_emphasis.py "Original", modules/prompt_parser.py get_learned_conditioning), or, with
// PromptSyntax::Plain, as diffusers' encode_prompt does (the text as it is, cut at 77 tokens).
//
// The webui's way, for one prompt:
// - its prompt-editing schedule gives the texts of the steps (prompt_schedule.h); all of them are encoded
//   together, as one batch, and every text gets as many 77-token chunks as the longest of them (the
//   missing ones are empty chunks: start, then end tokens);
// - each chunk (prompt_chunks.h) goes through the encoder on its own; the output rows are multiplied by
//   their tokens' weights and the whole batch of that chunk is then rescaled so that its mean is what it
//   was before ("Original" emphasis: one mean over every text, token and feature of the batch);
// - the chunks' outputs are concatenated along the tokens: [texts, 77 x chunks, features]. SDXL puts its
//   two encoders' outputs side by side and takes the pooled output from the first chunk.
// The negative prompt is a separate batch with its own schedule and chunk count.
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/model.h"

namespace kiln {

enum class PromptSyntax {
    A1111,  // AUTOMATIC1111's: emphasis, BREAK, 75-token chunks, prompt editing (docs/PROMPTS.md)
    Plain,  // diffusers': the text as it is, truncated to 77 tokens
};

// "a1111" or "none" (also "plain"); anything else is InvalidArgument naming the choices.
PromptSyntax parse_prompt_syntax(const std::string& name);

struct PromptEncodingOptions {
    PromptSyntax syntax = PromptSyntax::A1111;
    int clip_skip = 1;           // as GenerationRequest::clip_skip
    int schedule_steps = 20;     // the step count the prompt-editing schedule is built over (>= 1)
};

// One prompt's conditioning for the model calls up to `end_step` (the webui's ScheduledPromptConditioning).
struct ScheduledEncoding {
    int end_step = 0;
    Tensor context;  // [1, 77 x chunks, cross_attention_dim]
    Tensor pooled;   // SDXL: [1, pooled dim]; empty otherwise
};

// Each prompt's schedule, encoded as the webui encodes it (one batch per prompt; the prompts are only
// run through the encoders together to save passes, which changes nothing in their results). Throws
// InvalidArgument for a prompt the webui rejects (prompt_attention.h, prompt_schedule.h), for a clip skip
// deeper than the encoder, and for weights that make the conditioning infinite or NaN (the webui would
// sample on NaN and stop with its "NansException").
std::vector<std::vector<ScheduledEncoding>> encode_prompt_schedules(const StableDiffusionModel& model,
                                                                    const std::vector<std::string>& prompts,
                                                                    const PromptEncodingOptions& options);

// "Original" emphasis on one chunk's encoder output z [B, T, D] with one weight per row token (B x T
// weights): z x weight, then x (mean before / mean after), each mean over the whole batch, in float32 as
// torch computes it (the means are summed in double here; torch's float32 sums differ in the last bits).
// A batch whose weights are all 1 is left untouched (the webui's arithmetic is then exact: x 1, x 1).
void apply_original_emphasis(Tensor& z, const std::vector<double>& weights);

}  // namespace kiln
