// Where textual-inversion embeddings land in the 77-token chunks, against AUTOMATIC1111's own tokenize_line
// (ti_chunks_reference.py in tools/ckpt-ti/scripts.tar.xz ran it with the webui's embedding lookup on
// sd15-mini's tokenizer):
// the longest name first, vectors that do not fit starting the next chunk, the comma backtrack leaving a
// moved embedding's fix behind, weights from emphasis, BREAK, an embedding of 40 vectors.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "text/clip_tokenizer.h"
#include "text/prompt_attention.h"
#include "text/prompt_chunks.h"

using namespace kiln;

TEST(TextualInversionChunks, MatchAutomatic1111) {
    std::ifstream in(std::string(KILN_TI_DATA) + "/ti-chunks.json");
    ASSERT_TRUE(in.good());
    const nlohmann::json ref = nlohmann::json::parse(in);
    const ClipTokenizer tokenizer =
        ClipTokenizer::from_folder(std::string(KILN_TEST_DATA) + "/sd15-mini/diffusers/tokenizer");
    std::vector<PromptEmbedding> embeddings;
    std::vector<std::string> names;
    for (const auto& [name, vectors] : ref.at("embeddings").items()) {
        embeddings.push_back({embedding_name_ids(name, tokenizer), vectors.get<int>()});
        names.push_back(name);
    }
    ASSERT_GE(ref.at("cases").size(), 9u);
    for (const nlohmann::json& c : ref.at("cases")) {
        const std::string prompt = c.at("prompt");
        SCOPED_TRACE(prompt);
        const ChunkedPrompt got = chunk_prompt(parse_prompt_attention(prompt), tokenizer, embeddings);
        EXPECT_EQ(got.token_count, c.at("token_count").get<int>());
        ASSERT_EQ(got.chunks.size(), c.at("chunks").size());
        for (size_t k = 0; k < got.chunks.size(); ++k) {
            SCOPED_TRACE("chunk " + std::to_string(k));
            const nlohmann::json& want = c.at("chunks")[k];
            std::vector<int> ids = want.at("ids").get<std::vector<int>>();
            ids.resize(77, tokenizer.eos_id());  // the reference leaves out the padding's end tokens
            EXPECT_EQ(got.chunks[k].ids, ids);
            std::vector<double> weights(77, 1.0);
            for (const nlohmann::json& w : want.at("weights")) weights.at(w[0].get<size_t>()) = w[1].get<double>();
            EXPECT_EQ(got.chunks[k].weights, weights);
            std::vector<std::pair<int, std::string>> fixes, want_fixes;
            for (const EmbeddingFix& f : got.chunks[k].fixes) fixes.emplace_back(f.offset, names.at(size_t(f.embedding)));
            for (const nlohmann::json& f : want.at("fixes")) want_fixes.emplace_back(f[0].get<int>(), f[1].get<std::string>());
            EXPECT_EQ(fixes, want_fixes);
        }
    }
}
