// AUTOMATIC1111's emphasis syntax, read as its parse_prompt_attention (modules/prompt_parser.py) reads it:
// the prompt becomes a list of texts, each with the weight its tokens' encodings will be multiplied by.
//
//   (text)      weight x 1.1          [text]      weight / 1.1 (times 1 / 1.1, as Python computes it)
//   (text:1.3)  weight x 1.3          \( \) \[ \] \\   the character itself
//   BREAK       a separate entry, text "BREAK" with weight -1, that starts a new 75-token chunk
//
// Brackets nest and multiply. A bracket left open applies to the end of the prompt; a closing bracket
// with nothing to close is text. Neighbours of equal weight are merged; an empty prompt gives one empty
// text of weight 1. Weights are multiplied in the order Python multiplies them, so they are the same
// doubles. Invalid UTF-8 reads as U+FFFD.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

struct WeightedText {
    std::string text;
    double weight = 1.0;

    bool operator==(const WeightedText&) const = default;
};

// Throws kiln::Error (InvalidArgument) where Python raises ValueError: a "(text:W)" whose W is made of
// digits and dots but is no number, such as "1.2.3" or ".".
std::vector<WeightedText> parse_prompt_attention(std::string_view prompt);

// A BREAK entry as parse_prompt_attention emits it. One inside brackets has another weight and, in
// AUTOMATIC1111 as here, is no break but the word "BREAK".
bool is_break(const WeightedText& entry);

}  // namespace kiln
