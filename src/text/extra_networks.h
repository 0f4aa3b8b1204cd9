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

// A LoRA tag as the webui's Lora extension reads it (extra_networks_lora.py): "<lora:name:te:unet>". The
// text after "lora:" is split at ':'; an item with one '=' is named ("te=0.5", "unet=1"), the others are
// positional: the name, the text-encoder multiplier (1 without), the UNet multiplier (the text encoder's
// without). "<lyco:...>" is the same (the webui's alias).
struct LoraTag {
    std::string name;
    double te_multiplier = 1.0, unet_multiplier = 1.0;
};
bool is_lora_tag(const ExtraNetworkTag& tag);
// InvalidArgument for a tag without a name, or with a multiplier that Python's float() rejects or that is
// not finite (the webui rejects those too).
LoraTag parse_lora_tag(const ExtraNetworkTag& tag);

}  // namespace kiln
