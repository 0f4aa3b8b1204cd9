#include "text/clip_tokenizer_bpe.h"

#include <queue>

#include "kiln/error.h"
#include "text/unicode.h"

namespace kiln {

const std::array<std::string, 256>& ClipBpe::byte_chars() {
    static const std::array<std::string, 256> table = [] {
        // Printable Latin-1 bytes stand for themselves; the others (controls, space, soft hyphen) are
        // moved to U+0100 upwards, in byte order, so that no token contains whitespace or control codes.
        std::array<std::string, 256> t;
        char32_t next_free = 256;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            unicode::append_utf8(t[b], printable ? static_cast<char32_t>(b) : next_free++);
        }
        return t;
    }();
    return table;
}

ClipBpe::ClipBpe(std::unordered_map<std::string, int> vocab, const std::vector<std::string>& merges,
                 const std::string& vocab_source, const std::string& merges_source)
    : vocab_(std::move(vocab)) {
    for (const auto& [token, id] : vocab_) max_id_ = std::max(max_id_, id);

    auto lookup = [&](const std::string& token, const std::string& source, const std::string& where) {
        const auto it = vocab_.find(token);
        require(it != vocab_.end(), ErrorKind::InvalidModel,
                source + ": " + where + "token '" + token + "' is not in the vocabulary " + vocab_source);
        return it->second;
    };
    const auto& chars = byte_chars();
    for (int b = 0; b < 256; ++b) {
        byte_id_[b] = lookup(chars[b], vocab_source, "byte-level ");
        byte_eow_id_[b] = lookup(chars[b] + "</w>", vocab_source, "byte-level ");
    }

    merges_.reserve(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const std::string& line = merges[rank];
        const size_t space = line.find(' ');
        const std::string where = "merge " + std::to_string(rank + 1) + " ('" + line + "'): ";
        require(space != std::string::npos && space > 0 && space + 1 < line.size() &&
                    line.find(' ', space + 1) == std::string::npos,
                ErrorKind::InvalidModel, merges_source + ": " + where + "expected two tokens separated by one space");
        const std::string left = line.substr(0, space), right = line.substr(space + 1);
        const int left_id = lookup(left, merges_source, where);
        const int right_id = lookup(right, merges_source, where);
        const int merged_id = lookup(left + right, merges_source, where);
        // A repeated pair keeps its last rank, as the tokenizers library's hash map does.
        merges_.insert_or_assign(pair_key(left_id, right_id), Merge{static_cast<int>(rank), merged_id});
    }
}

void ClipBpe::encode_word(std::string_view word, std::vector<int>& out) const {
    const int n = static_cast<int>(word.size());
    if (n == 0) return;
    // Symbols form a linked list over the byte positions; a merge keeps the left position and unlinks the right.
    std::vector<int> id(n), prev(n), next(n);
    for (int i = 0; i < n; ++i) {
        const auto byte = static_cast<unsigned char>(word[i]);
        id[i] = i + 1 < n ? byte_id_[byte] : byte_eow_id_[byte];
        prev[i] = i - 1;
        next[i] = i + 1 < n ? i + 1 : -1;
    }

    struct Candidate {
        int rank, pos, left, right, merged;
        bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
    auto consider = [&](int pos) {
        if (pos < 0 || next[pos] < 0) return;
        const auto it = merges_.find(pair_key(id[pos], id[next[pos]]));
        if (it != merges_.end()) queue.push({it->second.rank, pos, id[pos], id[next[pos]], it->second.id});
    };
    for (int i = 0; i + 1 < n; ++i) consider(i);

    while (!queue.empty()) {
        const Candidate c = queue.top();
        queue.pop();
        // Entries go stale when a neighbour merged first; the pair must still be there as queued.
        const int right = next[c.pos];
        if (id[c.pos] != c.left || right < 0 || id[right] != c.right) continue;
        id[c.pos] = c.merged;
        id[right] = -1;
        next[c.pos] = next[right];
        if (next[right] >= 0) prev[next[right]] = c.pos;
        consider(prev[c.pos]);
        consider(c.pos);
    }
    for (int i = 0; i >= 0; i = next[i]) out.push_back(id[i]);
}

}  // namespace kiln
