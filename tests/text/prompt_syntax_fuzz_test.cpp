// Random prompts through parse_prompt_attention, prompt_schedule and chunk_prompt: nothing crashes (the
// sanitizer build runs this too), every call returns or throws kiln::Error, and what comes back keeps the
// shape the rest of kiln relies on. Fixed seeds and a bounded count: the same inputs on every run.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "kiln/error.h"
#include "text/clip_tokenizer.h"
#include "text/prompt_attention.h"
#include "text/prompt_chunks.h"
#include "text/prompt_schedule.h"

using namespace kiln;

namespace {

// One prompt through all three steps, checking what each returns.
void check_prompt(const std::string& prompt, int steps, const ClipTokenizer& tokenizer) {
    SCOPED_TRACE("prompt: " + testing::PrintToString(prompt));
    try {
        const std::vector<WeightedText> parsed = parse_prompt_attention(prompt);
        ASSERT_FALSE(parsed.empty());
        for (size_t i = 0; i < parsed.size(); ++i) {
            // Short prompts hold no number large enough to overflow a weight.
            EXPECT_TRUE(std::isfinite(parsed[i].weight)) << parsed[i].weight;
            if (i > 0) {
                EXPECT_NE(parsed[i].weight, parsed[i - 1].weight) << "neighbours of equal weight are merged";
            }
        }
        const ChunkedPrompt chunked = chunk_prompt(parsed, tokenizer);
        ASSERT_FALSE(chunked.chunks.empty());
        int tokens = 0;
        for (const PromptChunk& chunk : chunked.chunks) {
            ASSERT_EQ(chunk.ids.size(), 77u);
            ASSERT_EQ(chunk.weights.size(), 77u);
            EXPECT_EQ(chunk.ids.front(), tokenizer.bos_id());
            EXPECT_EQ(chunk.ids.back(), tokenizer.eos_id());
            EXPECT_LE(chunk.tokens, kPromptChunkTokens);
            tokens += chunk.tokens;
        }
        // The count is 75 a chunk but for the last one, which counts its tokens (a BREAK at the end closes
        // the last chunk early, and it then counts 75).
        EXPECT_GE(chunked.token_count, tokens);
        EXPECT_LE(chunked.token_count, kPromptChunkTokens * static_cast<int>(chunked.chunks.size()));
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
    }
    try {
        const std::vector<ScheduledPrompt> schedule = prompt_schedule(prompt, steps);
        ASSERT_FALSE(schedule.empty());
        EXPECT_GE(schedule.front().end_step, 1);
        EXPECT_EQ(schedule.back().end_step, steps);
        for (size_t i = 1; i < schedule.size(); ++i) EXPECT_LT(schedule[i - 1].end_step, schedule[i].end_step);
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
    }
}

}  // namespace

TEST(PromptSyntaxFuzz, RandomSyntaxStrings) {
    const ClipTokenizer tokenizer = ClipTokenizer::builtin();
    const std::vector<std::string> pieces = {"(", ")", "[", "]", ":", "|", "\\", " ", ",", ".", "a", "b", "1", "2",
                                             "0.5", "-", "e", "BREAK", "\n", "\t", "\xc3\xa9", "\xe3\x80\x80"};
    std::mt19937 rng(20240624);
    for (int n = 0; n < 1500; ++n) {
        std::string prompt;
        const int length = static_cast<int>(rng() % 40);
        for (int i = 0; i < length; ++i) prompt += pieces[rng() % pieces.size()];
        check_prompt(prompt, 1 + static_cast<int>(rng() % 25), tokenizer);
    }
}

TEST(PromptSyntaxFuzz, RandomBytes) {
    const ClipTokenizer tokenizer = ClipTokenizer::builtin();
    std::mt19937 rng(7);
    for (int n = 0; n < 1000; ++n) {
        std::string prompt(rng() % 48, '\0');
        for (char& c : prompt) c = static_cast<char>(rng() & 0xFF);
        check_prompt(prompt, 1 + static_cast<int>(rng() % 25), tokenizer);
    }
}

// Long prompts that would be slow for a parser that copies text per bracket: both readers stay linear here.
TEST(PromptSyntaxFuzz, LongUnbalancedPromptsTakeLinearTime) {
    const std::string open_brackets(100000, '(');
    EXPECT_EQ(parse_prompt_attention(open_brackets).size(), 1u);
    EXPECT_EQ(prompt_schedule(open_brackets + "[a|b]", 3).size(), 3u);
    const std::string stray = std::string(50000, ']') + std::string(50000, '[') + "x";
    EXPECT_EQ(prompt_schedule(stray, 5), (std::vector<ScheduledPrompt>{{5, stray}}));
}
