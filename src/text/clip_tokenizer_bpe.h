// The byte-level BPE model under CLIP's tokenizer: each byte of a pre-token maps to one printable
// character (GPT-2's bytes_to_unicode), the last one gets the "</w>" suffix, and merges are applied by
// rank, lowest first, leftmost first among equal ranks (the tokenizers library's BPE model).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kiln {

class ClipBpe {
public:
    // vocab: token -> id; merges: "left right" lines in rank order (no header). Every byte token, with and
    // without "</w>", and every merge's parts and result must be in the vocabulary; otherwise kiln::Error
    // naming vocab_source / merges_source.
    ClipBpe(std::unordered_map<std::string, int> vocab, const std::vector<std::string>& merges,
            const std::string& vocab_source, const std::string& merges_source);

    // Appends the ids of one pre-token (raw UTF-8 bytes, not yet byte-mapped).
    void encode_word(std::string_view word, std::vector<int>& out) const;

    const std::unordered_map<std::string, int>& vocab() const { return vocab_; }
    int max_id() const { return max_id_; }

    // GPT-2's reversible byte -> character table, each character as UTF-8.
    static const std::array<std::string, 256>& byte_chars();

private:
    struct Merge {
        int rank;
        int id;
    };
    static uint64_t pair_key(int left, int right) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
    }

    std::unordered_map<std::string, int> vocab_;
    std::unordered_map<uint64_t, Merge> merges_;
    std::array<int, 256> byte_id_{};      // byte -> id of its character
    std::array<int, 256> byte_eow_id_{};  // byte -> id of its character + "</w>"
    int max_id_ = -1;
};

}  // namespace kiln
