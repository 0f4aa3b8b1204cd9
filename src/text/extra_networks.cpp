#include "text/extra_networks.h"

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

}  // namespace kiln
