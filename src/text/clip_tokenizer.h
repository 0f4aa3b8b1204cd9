// CLIP's BPE tokenizer, token for token the same as transformers 5's CLIPTokenizer (the tokenizers-backed
// one, no ftfy) that diffusers uses for SD 1.x, SD 2.x and both SDXL text encoders.
//
// Pipeline: special tokens written literally are cut out of the raw text first (<|startoftext|>,
// <|endoftext|> and the pad token, e.g. SD2's "!"); each remaining piece is NFC-normalised and
// lowercased, split by CLIP's pattern (contractions 's 't 're 've 'm 'll 'd, runs of letters, single
// digits, runs of other non-space characters; whitespace dropped), and each pre-token is byte-level BPE
// encoded with "</w>" on its last symbol. Invalid UTF-8 never fails: each ill-formed sequence reads as
// U+FFFD. Copies are cheap (the tables are shared) and all const methods are thread-safe.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

class ClipBpe;

class ClipTokenizer {
public:
    // A diffusers tokenizer folder's vocab.json and merges.txt; the pad token is <|endoftext|>.
    static ClipTokenizer from_files(const std::string& vocab_json, const std::string& merges_txt);
    // A diffusers tokenizer folder (tokenizer/ or tokenizer_2/): vocab.json, merges.txt and the pad token
    // of tokenizer_config.json (or special_tokens_map.json), which is "!" for SD2 and SDXL's tokenizer_2.
    static ClipTokenizer from_folder(const std::string& tokenizer_dir);
    // kiln's own copy of OpenAI's CLIP vocabulary (for single-file checkpoints); pad token <|endoftext|>.
    // Built on first call, then shared.
    static ClipTokenizer builtin();

    // BPE ids WITHOUT bos/eos.
    std::vector<int> encode(const std::string& text) const;
    // bos + ids + eos, truncated to `length` keeping eos last (as transformers does with truncation=True,
    // max_length=length), then padded with pad_id up to `length`.
    std::vector<int> encode_padded(const std::string& text, int pad_id, int length = 77) const;

    // Makes `token` (which must be in the vocabulary) the pad token. Like every special token in
    // transformers, it is then matched literally in prompts before normalisation: with pad "!", "wow!!"
    // encodes as "wow" "!" "!" rather than "wow" "!!". Diffusers' SD2 / SDXL tokenizer_2 behave so.
    void set_pad_token(const std::string& token);
    int pad_id() const { return pad_id_; }

    int bos_id() const { return bos_id_; }  // <|startoftext|>
    int eos_id() const { return eos_id_; }  // <|endoftext|>
    int token_id(const std::string& token) const;  // e.g. "!" -> 0; unknown -> kiln::Error
    std::optional<int> find_token_id(const std::string& token) const;  // unknown -> nothing
    size_t vocab_size() const;

private:
    struct Special {
        std::u32string text;
        int id;
    };
    explicit ClipTokenizer(std::shared_ptr<const ClipBpe> bpe, const std::string& vocab_source);
    void encode_segment(const std::u32string& segment, std::vector<int>& out) const;

    std::shared_ptr<const ClipBpe> bpe_;
    std::vector<Special> specials_;  // matched literally in the raw text, longest first at each position
    int bos_id_ = -1, eos_id_ = -1, pad_id_ = -1;
};

}  // namespace kiln
