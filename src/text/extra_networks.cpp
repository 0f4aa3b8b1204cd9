#include "text/extra_networks.h"

#include <cmath>
#include <map>

#include "kiln/error.h"
#include "text/python_float.h"

namespace kiln {
namespace {

bool is_word_byte(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
}

}  // namespace

PromptWithoutTags remove_extra_network_tags(std::string_view prompt) {
    PromptWithoutTags out;
    size_t i = 0;
    while (i < prompt.size()) {
        if (prompt[i] == '<') {
            // <word:rest> with a non-empty word and a non-empty rest without '>'. Python's re tries each '<'
            // in turn, leftmost first, as this loop does.
            size_t j = i + 1;
            while (j < prompt.size() && is_word_byte(static_cast<unsigned char>(prompt[j]))) ++j;
            if (j > i + 1 && j < prompt.size() && prompt[j] == ':') {
                const size_t close = prompt.find('>', j + 1);
                if (close != std::string_view::npos && close > j + 1) {
                    out.tags.push_back({std::string(prompt.substr(i + 1, j - i - 1)),
                                        std::string(prompt.substr(i, close - i + 1))});
                    i = close + 1;
                    continue;
                }
            }
        }
        out.prompt += prompt[i];
        ++i;
    }
    return out;
}

bool is_lora_tag(const ExtraNetworkTag& tag) { return tag.kind == "lora" || tag.kind == "lyco"; }

LoraTag parse_lora_tag(const ExtraNetworkTag& tag) {
    // The text between "<kind:" and ">", split as Python's str.split(":").
    const std::string args = tag.text.substr(tag.kind.size() + 2, tag.text.size() - tag.kind.size() - 3);
    std::vector<std::string> positional;
    std::map<std::string, std::string> named;
    size_t start = 0;
    while (true) {
        const size_t colon = args.find(':', start);
        const std::string item = args.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
        const size_t eq = item.find('=');
        if (eq != std::string::npos && item.find('=', eq + 1) == std::string::npos)
            named[item.substr(0, eq)] = item.substr(eq + 1);
        else
            positional.push_back(item);
        if (colon == std::string::npos) break;
        start = colon + 1;
    }
    require(!positional.empty(), ErrorKind::InvalidArgument, tag.text + ": a LoRA tag must include a LoRA name");
    auto number = [&](const std::string& text) {
        // Python's float() ignores surrounding whitespace.
        const size_t b = text.find_first_not_of(" \t\n\r\f\v"), e = text.find_last_not_of(" \t\n\r\f\v");
        std::optional<double> v;
        if (b != std::string::npos) v = python::parse_float(std::string_view(text).substr(b, e - b + 1));
        require(v.has_value() && std::isfinite(v.value_or(0.0)), ErrorKind::InvalidArgument,
                tag.text + ": '" + text + "' is not a finite number (a LoRA multiplier)");
        return *v;
    };
    LoraTag out;
    out.name = positional[0];
    if (positional.size() > 1) out.te_multiplier = number(positional[1]);
    if (named.count("te")) out.te_multiplier = number(named["te"]);
    out.unet_multiplier = positional.size() > 2 ? number(positional[2]) : out.te_multiplier;
    if (named.count("unet")) out.unet_multiplier = number(named["unet"]);
    return out;
}

}  // namespace kiln
