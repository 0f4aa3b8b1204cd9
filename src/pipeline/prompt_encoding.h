// Prompts to text-encoder outputs as AUTOMATIC1111's webui makes them (modules/sd_hijack_clip.py,
// modules/sd_emphasis.py "Original", modules/prompt_parser.py get_learned_conditioning), or, with
// PromptSyntax::Plain, as diffusers' encode_prompt does (the text as it is, cut at 77 tokens).
//
// The webui's way: a prompt's scheduled texts are encoded as one batch, padded to the same number of
// 77-token chunks with empty chunks; each chunk goes through the encoder alone, its rows are multiplied by
// their weights and the chunk's batch rescaled to its mean before ("Original" emphasis); chunks are joined
// along the tokens. SDXL joins its encoders side by side, pooled from the first chunk. docs/PROMPTS.md.
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/model.h"
#include "text/textual_inversion.h"

namespace kiln {

enum class PromptSyntax {
    A1111,  // AUTOMATIC1111's: emphasis, BREAK, 75-token chunks, prompt editing (docs/PROMPTS.md)
    Plain,  // diffusers': the text as it is, truncated to 77 tokens
};

// "a1111" or "none" (also "plain"); anything else is InvalidArgument naming the choices.
PromptSyntax parse_prompt_syntax(const std::string& name);

// The webui's "Emphasis mode" setting (modules/sd_emphasis.py), for PromptSyntax::A1111:
enum class EmphasisMode {
    Original,  // "Original": weights multiplied into the encoder's output, then its mean restored (the default)
    NoNorm,    // "No norm": weights multiplied in, the mean left as it is
    Ignore,    // "Ignore": the syntax is read (brackets and weights removed, BREAK), the weights not applied
    None,      // "None": no emphasis syntax: brackets, weights, escapes and BREAK are plain text
};

// "original", "no-norm", "ignore" or "none"; anything else is InvalidArgument naming the choices.
EmphasisMode parse_emphasis_mode(const std::string& name);
// The webui's name of the mode, which its PNG parameters record as "Emphasis: <name>".
const char* emphasis_mode_label(EmphasisMode mode);

struct PromptEncodingOptions {
    PromptSyntax syntax = PromptSyntax::A1111;
    EmphasisMode emphasis = EmphasisMode::Original;
    int clip_skip = 1;           // as GenerationRequest::clip_skip
    int schedule_steps = 20;     // the step count the prompt-editing schedule is built over (>= 1)
    // Textual-inversion embeddings the prompts may name (A1111 syntax; those that do not fit the model's
    // encoders are read as words, as the webui skips them). Not owned.
    const std::vector<TextualInversion>* embeddings = nullptr;
    // Filled with the names of the embeddings the prompts used, in order of first use (for "TI hashes").
    std::vector<std::string>* used_embeddings = nullptr;
    // Set to true when an encoded text (a scheduled text of any prompt) holds '(' or '[': the webui then
    // records a mode other than "Original" in the PNG parameters (modules/sd_hijack_clip.py).
    bool* texts_with_brackets = nullptr;
};

// One prompt's conditioning for the model calls up to `end_step` (the webui's ScheduledPromptConditioning).
struct ScheduledEncoding {
    int end_step = 0;
    Tensor context;  // [1, 77 x chunks, cross_attention_dim]
    Tensor pooled;   // SDXL: [1, pooled dim]; empty otherwise
};

// Each prompt's schedule, encoded as the webui encodes it (emphasis per prompt; the prompts share encoder
// passes only). InvalidArgument for a prompt the webui rejects, a clip skip deeper than the encoder, or
// weights that make the conditioning infinite or NaN (the webui would sample on NaN).
std::vector<std::vector<ScheduledEncoding>> encode_prompt_schedules(const StableDiffusionModel& model,
                                                                    const std::vector<std::string>& prompts,
                                                                    const PromptEncodingOptions& options);

// The emphasis of `mode` on a chunk's output z [B, T, D] (one weight per token): Original as below, NoNorm z x
// weight (as float32), Ignore and None nothing.
void apply_emphasis(Tensor& z, const std::vector<double>& weights, EmphasisMode mode);

// "Original" emphasis on a chunk's output z [B, T, D], one weight per token: z x weight (as float32), then x
// mean before / mean after (whole batch). All weights 1: untouched (the webui's x 1, x 1 is then exact).
void apply_original_emphasis(Tensor& z, const std::vector<double>& weights);

}  // namespace kiln
