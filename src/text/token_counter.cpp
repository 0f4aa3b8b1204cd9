#include "text/token_counter.h"

#include "kiln/error.h"
#include "text/composable_prompt.h"
#include "text/extra_networks.h"
#include "text/prompt_attention.h"
#include "text/prompt_schedule.h"

namespace kiln {

TokenCount count_prompt_tokens(const std::string& prompt, int steps, const ClipTokenizer& tokenizer,
                               const std::vector<PromptEmbedding>& embeddings, bool negative) {
    const std::string text = remove_extra_network_tags(prompt).prompt;
    std::vector<std::string> texts;
    try {
        std::vector<std::string> parts{text};
        if (!negative) {
            parts.clear();
            for (const ComposablePart& part : split_composable_prompt(text)) parts.push_back(part.text);
        }
        for (const std::string& part : parts)
            for (const ScheduledPrompt& s : prompt_schedule(part, steps)) texts.push_back(s.prompt);
    } catch (const Error&) {
        texts = {text};
    }
    // max() over (count, target) pairs by the count: the first text of the largest count.
    ChunkedPrompt most;
    most.token_count = -1;
    for (const std::string& t : texts) {
        ChunkedPrompt c = chunk_prompt(parse_prompt_attention(t), tokenizer, embeddings);
        if (c.token_count > most.token_count) most = std::move(c);
    }
    return {most.token_count, most.target()};
}

}  // namespace kiln
