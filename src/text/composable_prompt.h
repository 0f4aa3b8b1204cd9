// AUTOMATIC1111's composable diffusion ("a cat AND a dog :0.5"): the webui splits the prompt at every "AND"
// first (modules/prompt_parser.py get_multicond_prompt_list, re.split(r"\bAND\b")), before any other syntax
// is read, so an AND inside brackets splits them too. Each part may end in ":<number>", its weight (1
// without); the part's text keeps its leading whitespace and loses the trailing whitespace. Each part then
// has its own prompt-editing schedule and emphasis, and guidance adds weight x scale x (part - negative) for
// every part. Only the prompt is split; the negative prompt reads "AND" as a word.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

struct ComposablePart {
    std::string text;
    double weight = 1.0;

    bool operator==(const ComposablePart&) const = default;
};

// The parts in order (at least one; "" gives one empty part). A weight is the regex's
// [-+]?(\d+\.?|\d*\.\d+) (digits of any script, no exponent) read by Python's float(): 400 digits give
// infinity, which the caller must refuse. Invalid UTF-8 reads as U+FFFD.
std::vector<ComposablePart> split_composable_prompt(std::string_view prompt);

// Whether the parts guide other than a plain prompt does: more than one part, or a weight other than 1.
bool is_composed(const std::vector<ComposablePart>& parts);

}  // namespace kiln
