// parse_prompt_attention against AUTOMATIC1111's own results (the fixture), text for text and weight for
// weight, including the prompts on which Python raises.
#include <gtest/gtest.h>

#include "kiln/error.h"
#include "text/a1111_fixture.h"
#include "text/prompt_attention.h"

using namespace kiln;
using kiln::test::a1111_fixture;

namespace {

std::string describe(const std::vector<WeightedText>& parsed) {
    std::string s;
    for (const WeightedText& e : parsed) s.append(nlohmann::json::array({e.text, e.weight}).dump()).append(" ");
    return s;
}

}  // namespace

TEST(PromptAttention, MatchesAutomatic1111) {
    const nlohmann::json& cases = a1111_fixture().at("attention");
    ASSERT_GT(cases.size(), 300u);
    int errors = 0;
    for (const nlohmann::json& c : cases) {
        const std::string prompt = c.at("prompt").get<std::string>();
        SCOPED_TRACE("prompt: " + nlohmann::json(prompt).dump());
        if (c.contains("error")) {
            // Python raises ValueError for a weight such as "1.2.3"; kiln says so in its own error.
            ++errors;
            EXPECT_EQ(c.at("error"), "ValueError");
            try {
                parse_prompt_attention(prompt);
                ADD_FAILURE() << "no error";
            } catch (const Error& e) {
                EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
                EXPECT_NE(std::string(e.what()).find("weight"), std::string::npos) << e.what();
            }
            continue;
        }
        const std::vector<WeightedText> got = parse_prompt_attention(prompt);
        const nlohmann::json& want = c.at("parsed");
        ASSERT_EQ(got.size(), want.size()) << describe(got);
        for (size_t i = 0; i < got.size(); ++i) {
            EXPECT_EQ(got[i].text, want[i].at(0).get<std::string>()) << "entry " << i;
            const double w = kiln::test::fixture_double(want[i].at(1));
            EXPECT_TRUE(kiln::test::same_double(got[i].weight, w))
                << "entry " << i << ": " << got[i].weight << " vs " << w << " (" << describe(got) << ")";
        }
    }
    EXPECT_GE(errors, 3);  // the fixture does exercise the failing weights
}

// The docstring's own example, whose weights AUTOMATIC1111 prints (1.1 * 1.1 * 1.3 and 1.1^4 as Python
// rounds them): the case that shows the products are taken in Python's order.
TEST(PromptAttention, DocstringExampleToTheLastBit) {
    const std::vector<WeightedText> got = parse_prompt_attention("a (((house:1.3)) [on] a (hill:0.5), sun, (((sky))).");
    const std::vector<WeightedText> want = {{"a ", 1.0},  {"house", 1.5730000000000004}, {" ", 1.1},
                                            {"on", 1.0},  {" a ", 1.1},                  {"hill", 0.55},
                                            {", sun, ", 1.1}, {"sky", 1.4641000000000006}, {".", 1.1}};
    EXPECT_EQ(got, want) << describe(got);
}

TEST(PromptAttention, BreakIsRecognisedOnlyUnweighted) {
    const std::vector<WeightedText> plain = parse_prompt_attention("a BREAK b");
    ASSERT_EQ(plain.size(), 3u);
    EXPECT_TRUE(is_break(plain[1]));
    const std::vector<WeightedText> weighted = parse_prompt_attention("(a BREAK b)");
    ASSERT_EQ(weighted.size(), 3u);
    EXPECT_EQ(weighted[1].text, "BREAK");
    EXPECT_FALSE(is_break(weighted[1]));
}
