// AUTOMATIC1111's prompt editing and alternation: the prompt each sampling step is conditioned on, as its
// get_learned_conditioning_prompt_schedules (modules/prompt_parser.py) computes it with the webui's
// defaults (a first pass without hires fix, "use_old_scheduling" off).
//
//   [from:to:when]  "from" up to step `when`, then "to"      [to:when]  nothing, then "to"
//   [from::when]    "from", then nothing                     [a|b|c]    a, b, c, a, ... one per step
//
// `when` with a '.' is a fraction of the steps (0.25 of 20: step 5; 1.5 of 20: all 20), without one a step
// number (3, 1e1); it is truncated toward zero and capped at the step count. Groups nest. Emphasis
// brackets and their weights are kept as text here; parse_prompt_attention reads them afterwards, in each
// scheduled prompt.
//
// The webui parses with a lark grammar that is ambiguous where a valid group is followed by stray brackets
// ("[a:b:2]]"): it then reads the group either as an edit or as plain text, depending on Python's string
// hash seed, so on different runs of the webui. kiln always reads every bracket group that is valid as such
// (an outcome the webui also produces); elsewhere it gives the webui's one result. A prompt that the grammar
// rejects (a '|' outside any alternation, a backslash at the end or before a line break) is used as it is,
// for every step, as the webui does.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

struct ScheduledPrompt {
    int end_step = 0;    // the webui uses this prompt while its step counter (from 0) is at most end_step
    std::string prompt;

    bool operator==(const ScheduledPrompt&) const = default;
};

// The prompts for steps 1..steps (steps >= 1), in order; the last ends at `steps`. Invalid UTF-8 reads as
// U+FFFD. Throws kiln::Error (InvalidArgument) where the webui raises: a `when` out of the range of a
// double ("1e400"), or groups nested deeper than kMaxPromptNesting (the webui's Python recursion runs out
// near 245 levels).
std::vector<ScheduledPrompt> prompt_schedule(std::string_view prompt, int steps);

inline constexpr int kMaxPromptNesting = 1000;

}  // namespace kiln
