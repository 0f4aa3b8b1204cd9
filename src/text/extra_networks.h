// AUTOMATIC1111's extra-network tags, "<lora:name:0.8>", "<hypernet:name>": the webui takes every
// "<word:text>" out of a prompt before anything else reads it (modules/extra_networks.py, its pattern
// <(\w+):([^>]+)>), and activates the networks they name. kiln applies none yet; it takes the tags out as the
// webui does (so the rest of the prompt is conditioned as there) and reports each one, never encoding it
// as words.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

struct ExtraNetworkTag {
    std::string kind;  // "lora", "hypernet", "lyco", ...: the word before the first ':'
    std::string text;  // the whole tag as written, "<lora:name:0.8>"
};

struct PromptWithoutTags {
    std::string prompt;                 // the prompt with every tag removed (nothing else changes)
    std::vector<ExtraNetworkTag> tags;  // in order of appearance
};

// `\w`: ASCII letters, digits, '_', and any non-ASCII byte (Python's Unicode \w, roughly).
PromptWithoutTags remove_extra_network_tags(std::string_view prompt);

}  // namespace kiln
