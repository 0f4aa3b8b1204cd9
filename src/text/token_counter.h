// The "N/75" count AUTOMATIC1111 shows under its prompt boxes (modules/ui.py update_token_counter): the prompt
// without its extra-network tags, split at AND (the prompt; not the negative prompt), each part's prompt-editing
// schedule, and the most tokens tokenize_line counts for any scheduled text (embeddings count their vectors).
#pragma once
#include <string>
#include <vector>

#include "text/clip_tokenizer.h"
#include "text/prompt_chunks.h"

namespace kiln {

struct TokenCount {
    int token_count = 0;
    int target = 75;  // the count rounded up to a multiple of 75
};

// Where the schedule cannot be read (the webui catches the exception), the whole text is counted as one
// prompt, as there. A weight Python's float() rejects is InvalidArgument, as the webui's counter fails there.
TokenCount count_prompt_tokens(const std::string& prompt, int steps, const ClipTokenizer& tokenizer,
                               const std::vector<PromptEmbedding>& embeddings = {}, bool negative = false);

}  // namespace kiln
