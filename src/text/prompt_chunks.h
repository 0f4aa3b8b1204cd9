// How AUTOMATIC1111 cuts a parsed prompt into the 77-token chunks its CLIP text encoders see
// (tokenize_line in modules/sd_hijack_clip.py), with the webui's default "comma_padding_backtrack" of 20.
//
// Each text of parse_prompt_attention's list is tokenized on its own, and its tokens carry its weight.
// Tokens fill chunks of 75; a BREAK entry closes the chunk early. When a chunk is full and the next token
// is not a comma, the tokens after the chunk's last comma move on to the next chunk, if that comma is
// among the chunk's last 20 tokens (a comma that opened the chunk does not count). Every chunk is padded
// with end tokens to 75 and framed by a start and an end token: 77 ids, 77 weights (1 for the frame and
// the padding). Encoders whose pad token is not the end token (OpenCLIP: "!", id 0) get the pad id after
// the chunk's first end token, as the webui feeds them.
// Textual-inversion embeddings: where a text's tokens start with an embedding's name tokens (the longest
// name first), its n vectors take n places (id 0, the text's weight), in the next chunk when they do not
// fit in this one, and the chunk records a fix: the encoder puts the vectors there. As in the webui, a
// comma backtrack moves the placeholders into the next chunk but leaves their fixes with the chunk they
// were in (modules/sd_hijack_clip.py does not move chunk.fixes), so the vectors land on its padding.
#pragma once
#include <vector>

#include "text/clip_tokenizer.h"
#include "text/prompt_attention.h"

namespace kiln {

inline constexpr int kPromptChunkTokens = 75;
inline constexpr int kCommaBacktrack = 20;

// An embedding as a prompt sees it: its name in the encoder's tokens (no start or end token), its size.
struct PromptEmbedding {
    std::vector<int> name_ids;
    int vectors = 0;
};

// An embedding's vectors go to ids[offset + 1 ...] (after the start token), as many as fit before the end.
struct EmbeddingFix {
    int offset = 0;
    int embedding = 0;  // index into chunk_prompt's `embeddings`
};

struct PromptChunk {
    std::vector<int> ids;         // 77
    std::vector<double> weights;  // 77
    int tokens = 0;               // prompt tokens in it; the rest is frame and padding
    std::vector<EmbeddingFix> fixes;
};

struct ChunkedPrompt {
    std::vector<PromptChunk> chunks;  // at least one
    // The webui's count, shown as "token_count/target" under its prompt box: 75 for every chunk but the
    // last, plus the last one's tokens.
    int token_count = 0;
    int target() const;  // token_count rounded up to a multiple of 75 (75 at least)
};

// The tokenizer is the encoder's own (its pad token decides the padding). Its text is read as the webui's
// tokenizers read it: the pad token is matched as ordinary text, not as a special token.
ChunkedPrompt chunk_prompt(const std::vector<WeightedText>& parsed, const ClipTokenizer& tokenizer,
                           const std::vector<PromptEmbedding>& embeddings = {});

// An embedding's name in the tokens chunk_prompt reads texts with.
std::vector<int> embedding_name_ids(const std::string& name, const ClipTokenizer& tokenizer);

}  // namespace kiln
