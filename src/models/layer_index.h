// A layer number inside a tensor name of the original layout ("input_blocks.4.1", "up.0.block.2"),
// as the single-file table builders read it.
#pragma once
#include <optional>
#include <string_view>

namespace kiln {

// The number that `text` spells: decimal digits, at most six, and no leading zero but in "0" itself.
// Exporters write indices that way; reading "00" or "04" as well would give one weight a second name,
// so that a damaged name loads as the original, or two tensors fill one weight and one goes unread.
inline std::optional<int> layer_index(std::string_view text) {
    if (text.empty() || text.size() > 6 || (text.size() > 1 && text[0] == '0')) return std::nullopt;
    int n = 0;
    for (char c : text) {
        if (c < '0' || c > '9') return std::nullopt;
        n = n * 10 + (c - '0');
    }
    return n;
}

}  // namespace kiln
