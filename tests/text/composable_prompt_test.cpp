// The AND split against AUTOMATIC1111's own get_multicond_prompt_list (tests/data/prompt-syntax/a1111_and_emphasis.tar.xz,
// made by make_and_fixtures.py in tools/prompt-syntax/scripts.tar.xz): texts byte for byte, weights to the last bit.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include "text/a1111_fixture.h"
#include "text/composable_prompt.h"
#include "text/token_counter.h"

using namespace kiln;

namespace {

const nlohmann::json& and_fixture() {
    static const nlohmann::json fixture = [] {
        std::ifstream in(std::string(KILN_PROMPT_AND_DATA) + "/a1111_and.json", std::ios::binary);
        EXPECT_TRUE(in.good());
        std::ostringstream text;
        text << in.rdbuf();
        return nlohmann::json::parse(text.str());
    }();
    return fixture;
}

}  // namespace

TEST(ComposablePrompt, MatchesAutomatic1111) {
    const nlohmann::json& cases = and_fixture();
    ASSERT_GT(cases.size(), 150u);
    for (const nlohmann::json& c : cases) {
        const std::string prompt = c.at("prompt").get<std::string>();
        SCOPED_TRACE("prompt: " + nlohmann::json(prompt).dump());
        const std::vector<ComposablePart> parts = split_composable_prompt(prompt);
        const nlohmann::json& want = c.at("parts");
        ASSERT_EQ(parts.size(), want.size());
        for (size_t i = 0; i < parts.size(); ++i) {
            EXPECT_EQ(parts[i].text, want[i].at(0).get<std::string>()) << "part " << i;
            const double w = test::fixture_double(want[i].at(1));
            EXPECT_TRUE(test::same_double(parts[i].weight, w)) << "part " << i << ": " << parts[i].weight << " vs " << w;
        }
    }
}

TEST(ComposablePrompt, PlainPromptsAreNotComposed) {
    EXPECT_FALSE(is_composed(split_composable_prompt("a cat")));
    EXPECT_FALSE(is_composed(split_composable_prompt("a cat:1")));  // weight 1: guided as a plain prompt
    EXPECT_TRUE(is_composed(split_composable_prompt("a cat:0.5")));
    EXPECT_TRUE(is_composed(split_composable_prompt("a cat AND a dog")));
}

// Random syntax strings and random bytes: never a crash, always at least one part, and the parts' texts are
// valid UTF-8 (invalid input reads as U+FFFD).
TEST(ComposablePrompt, Fuzz) {
    const std::vector<std::string> alphabet = {"A", "N", "D", "AND", " AND ", "a", ":", "0", "1", ".", "-", "+", " ",
                                               "\n", "\xc3\xa9", "\xd9\xa5", "\xe3\x80\x80", "\xff", "_"};
    std::mt19937 rng(7);
    for (int i = 0; i < 20000; ++i) {
        std::string prompt;
        const int n = static_cast<int>(rng() % 24);
        for (int k = 0; k < n; ++k) {
            if (i % 2) prompt += alphabet[rng() % alphabet.size()];
            else prompt.push_back(static_cast<char>(rng() & 0xff));
        }
        const std::vector<ComposablePart> parts = split_composable_prompt(prompt);
        ASSERT_FALSE(parts.empty());
        size_t and_count = 0;
        for (size_t p = prompt.find("AND"); p != std::string::npos; p = prompt.find("AND", p + 1)) ++and_count;
        ASSERT_LE(parts.size(), and_count + 1);
    }
}

// The "N/75" under the webui's prompt boxes: tags removed, the prompt's AND parts (not the negative's), each
// part's schedule, the most tokens of any text; the whole text where the schedule cannot be read.
TEST(ComposablePrompt, TokenCounterMatchesAutomatic1111) {
    const ClipTokenizer tokenizer =
        ClipTokenizer::from_folder(std::string(KILN_TEST_DATA) + "/sd15-mini/diffusers/tokenizer");
    int checked = 0;
    for (const nlohmann::json& c : and_fixture()) {
        if (!c.contains("token_count")) continue;
        const std::string prompt = c.at("prompt").get<std::string>();
        SCOPED_TRACE("prompt: " + nlohmann::json(prompt).dump());
        const TokenCount positive = count_prompt_tokens(prompt, 20, tokenizer);
        EXPECT_EQ(positive.token_count, c.at("token_count").get<int>());
        EXPECT_EQ(positive.target, (std::max(positive.token_count, 1) + 74) / 75 * 75);
        EXPECT_EQ(count_prompt_tokens(prompt, 20, tokenizer, {}, true).token_count,
                  c.at("negative_token_count").get<int>());
        ++checked;
    }
    EXPECT_GT(checked, 60);
}
