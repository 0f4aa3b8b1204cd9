#include "text/prompt_chunks.h"

#include <algorithm>

namespace kiln {

int ChunkedPrompt::target() const {
    const int count = std::max(token_count, 1);
    return (count + kPromptChunkTokens - 1) / kPromptChunkTokens * kPromptChunkTokens;
}

namespace {

// The webui's tokenizers know only the start and end tokens as special; kiln's treats the pad token as
// special too (as diffusers' does), so that one is set back to the end token for reading the text.
ClipTokenizer webui_reader(const ClipTokenizer& tokenizer) {
    ClipTokenizer reader = tokenizer;
    reader.set_pad_token("<|endoftext|>");
    return reader;
}

// The embedding whose name starts at tokens[at], the longest name first (the first of equal ones), or -1.
int embedding_at(const std::vector<int>& tokens, size_t at, const std::vector<PromptEmbedding>& embeddings) {
    int best = -1;
    for (size_t e = 0; e < embeddings.size(); ++e) {
        const std::vector<int>& name = embeddings[e].name_ids;
        if (name.empty() || name.size() > tokens.size() - at || !std::equal(name.begin(), name.end(), tokens.begin() + at))
            continue;
        if (best == -1 || name.size() > embeddings[static_cast<size_t>(best)].name_ids.size()) best = static_cast<int>(e);
    }
    return best;
}

}  // namespace

std::vector<int> embedding_name_ids(const std::string& name, const ClipTokenizer& tokenizer) {
    return webui_reader(tokenizer).encode(name);
}

ChunkedPrompt chunk_prompt(const std::vector<WeightedText>& parsed, const ClipTokenizer& tokenizer,
                           const std::vector<PromptEmbedding>& embeddings) {
    const ClipTokenizer reader = webui_reader(tokenizer);
    const int bos = tokenizer.bos_id(), eos = tokenizer.eos_id(), pad = tokenizer.pad_id();
    const int comma = tokenizer.find_token_id(",</w>").value_or(-1);

    ChunkedPrompt result;
    std::vector<int> ids;
    std::vector<double> weights;
    std::vector<EmbeddingFix> fixes;
    int last_comma = -1;  // index in `ids` of the chunk's last comma, -1 for none

    auto close_chunk = [&](bool last) {
        result.token_count += last ? static_cast<int>(ids.size()) : kPromptChunkTokens;
        PromptChunk chunk;
        chunk.tokens = static_cast<int>(ids.size());
        chunk.ids.push_back(bos);
        chunk.ids.insert(chunk.ids.end(), ids.begin(), ids.end());
        chunk.ids.resize(kPromptChunkTokens + 2, eos);
        chunk.weights.push_back(1.0);
        chunk.weights.insert(chunk.weights.end(), weights.begin(), weights.end());
        chunk.weights.resize(kPromptChunkTokens + 2, 1.0);
        if (pad != eos) {
            const auto first_end = std::find(chunk.ids.begin(), chunk.ids.end(), eos);
            std::fill(first_end + 1, chunk.ids.end(), pad);
        }
        chunk.fixes = std::move(fixes);
        result.chunks.push_back(std::move(chunk));
        ids.clear();
        weights.clear();
        fixes.clear();
        last_comma = -1;
    };

    for (const WeightedText& entry : parsed) {
        if (is_break(entry)) {
            close_chunk(false);
            continue;
        }
        const std::vector<int> tokens = reader.encode(entry.text);
        for (size_t position = 0; position < tokens.size();) {
            const int token = tokens[position];
            const bool full = static_cast<int>(ids.size()) == kPromptChunkTokens;
            if (token == comma) {
                last_comma = static_cast<int>(ids.size());
            } else if (full && last_comma != -1 && kPromptChunkTokens - last_comma <= kCommaBacktrack) {
                // Move what follows the comma into the next chunk.
                const std::vector<int> moved_ids(ids.begin() + last_comma + 1, ids.end());
                const std::vector<double> moved_weights(weights.begin() + last_comma + 1, weights.end());
                ids.resize(static_cast<size_t>(last_comma) + 1);
                weights.resize(static_cast<size_t>(last_comma) + 1);
                close_chunk(false);
                ids = moved_ids;
                weights = moved_weights;
            }
            if (static_cast<int>(ids.size()) == kPromptChunkTokens) close_chunk(false);
            const int e = embedding_at(tokens, position, embeddings);
            if (e < 0) {
                ids.push_back(token);
                weights.push_back(entry.weight);
                ++position;
                continue;
            }
            const int n = embeddings[static_cast<size_t>(e)].vectors;
            if (static_cast<int>(ids.size()) + n > kPromptChunkTokens) close_chunk(false);
            fixes.push_back({static_cast<int>(ids.size()), e});
            ids.insert(ids.end(), static_cast<size_t>(n), 0);
            weights.insert(weights.end(), static_cast<size_t>(n), entry.weight);
            position += embeddings[static_cast<size_t>(e)].name_ids.size();
        }
    }
    if (!ids.empty() || result.chunks.empty()) close_chunk(true);
    return result;
}

}  // namespace kiln
