// chunk_prompt against the chunks of AUTOMATIC1111's tokenize_line (the fixture: computed with
// transformers' CLIPTokenizer and checked against the webui's own code), with the end token as padding
// (SD 1.x, SDXL's first encoder) and with 0 after the first end token (OpenCLIP).
#include <gtest/gtest.h>

#include "text/a1111_fixture.h"
#include "text/clip_tokenizer.h"
#include "text/prompt_chunks.h"

using namespace kiln;
using kiln::test::a1111_fixture;
using kiln::test::expand_runs;

namespace {

// The tokenizer the fixture was made with (the full CLIP vocabulary).
ClipTokenizer fixture_tokenizer() {
    return ClipTokenizer::from_folder(std::string(KILN_TEST_DATA) + "/sd15-mini/diffusers/tokenizer");
}

void expect_matches(const ClipTokenizer& eos_padded, const std::string& label) {
    SCOPED_TRACE(label);
    ClipTokenizer zero_padded = eos_padded;
    zero_padded.set_pad_token("!");
    const nlohmann::json& cases = a1111_fixture().at("chunks");
    ASSERT_GT(cases.size(), 40u);
    for (const nlohmann::json& c : cases) {
        const std::string prompt = c.at("prompt").get<std::string>();
        const bool zero = c.at("pad") == "zero";
        SCOPED_TRACE("prompt: " + nlohmann::json(prompt).dump() + (zero ? ", pad 0" : ""));
        const ChunkedPrompt got = chunk_prompt(parse_prompt_attention(prompt), zero ? zero_padded : eos_padded);
        EXPECT_EQ(got.token_count, c.at("token_count").get<int>());
        EXPECT_EQ(got.target(), c.at("target").get<int>());
        const nlohmann::json& chunks = c.at("chunks");
        ASSERT_EQ(got.chunks.size(), chunks.size());
        for (size_t k = 0; k < chunks.size(); ++k) {
            SCOPED_TRACE("chunk " + std::to_string(k));
            const PromptChunk& chunk = got.chunks[k];
            EXPECT_EQ(chunk.tokens, chunks[k].at("tokens").get<int>());
            std::vector<int> ids;
            for (const nlohmann::json& id : expand_runs(chunks[k].at("ids"))) ids.push_back(id.get<int>());
            EXPECT_EQ(chunk.ids, ids);
            const std::vector<nlohmann::json> weights = expand_runs(chunks[k].at("weights"));
            ASSERT_EQ(chunk.weights.size(), weights.size());
            for (size_t t = 0; t < weights.size(); ++t)
                EXPECT_TRUE(kiln::test::same_double(chunk.weights[t], kiln::test::fixture_double(weights[t])))
                    << "token " << t << ": " << chunk.weights[t];
        }
    }
}

}  // namespace

TEST(PromptChunks, MatchesAutomatic1111) { expect_matches(fixture_tokenizer(), "tokenizer folder"); }

// kiln's built-in vocabulary is CLIP's, so single-file checkpoints chunk the same way.
TEST(PromptChunks, BuiltinVocabularyChunksTheSame) { expect_matches(ClipTokenizer::builtin(), "builtin vocabulary"); }
