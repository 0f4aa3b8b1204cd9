// prompt_schedule against AUTOMATIC1111's own schedules (the fixture). Where the webui's result depended on
// Python's hash seed, the fixture holds every outcome seen, and kiln's must be one of them.
#include <gtest/gtest.h>

#include "kiln/error.h"
#include "text/a1111_fixture.h"
#include "text/prompt_schedule.h"

using namespace kiln;
using kiln::test::a1111_fixture;

namespace {

nlohmann::json as_json(const std::vector<ScheduledPrompt>& schedule) {
    nlohmann::json j = nlohmann::json::array();
    for (const ScheduledPrompt& s : schedule) j.push_back({s.end_step, s.prompt});
    return j;
}

}  // namespace

TEST(PromptSchedule, MatchesAutomatic1111) {
    const nlohmann::json& cases = a1111_fixture().at("schedules");
    ASSERT_GT(cases.size(), 300u);
    int hash_dependent = 0, errors = 0;
    for (const nlohmann::json& c : cases) {
        const std::string prompt = c.at("prompt").get<std::string>();
        const int steps = c.at("steps").get<int>();
        SCOPED_TRACE("prompt: " + nlohmann::json(prompt).dump() + ", steps " + std::to_string(steps));
        if (c.contains("error")) {
            // OverflowError: a `when` beyond the doubles ("1e400"), which Python's int() refuses.
            ++errors;
            EXPECT_EQ(c.at("error"), "OverflowError");
            EXPECT_THROW(prompt_schedule(prompt, steps), Error);
            continue;
        }
        const nlohmann::json got = as_json(prompt_schedule(prompt, steps));
        const nlohmann::json& outcomes = c.at("outcomes");
        if (outcomes.size() > 1) ++hash_dependent;
        bool found = false;
        for (const nlohmann::json& outcome : outcomes) found = found || outcome == got;
        EXPECT_TRUE(found) << "kiln: " << got.dump() << "\nAUTOMATIC1111: " << outcomes.dump();
    }
    EXPECT_GE(errors, 3);
    EXPECT_GE(hash_dependent, 5);  // the ambiguous prompts are in the fixture
}

// Nesting: the webui's Python recursion gives out near 245 levels; kiln reads kMaxPromptNesting levels and
// refuses more with a clear error rather than running out of stack. Deep groups read as shallow ones do:
// the edit inside 999 emphasis brackets schedules like "[a:b:3]" (a fixture case), wrapped.
TEST(PromptSchedule, DeepNestingIsReadOrRefusedNeverCrashes) {
    const std::string open(kMaxPromptNesting - 1, '('), close(kMaxPromptNesting - 1, ')');
    std::vector<ScheduledPrompt> wrapped = prompt_schedule("[a:b:3]", 10);
    for (ScheduledPrompt& s : wrapped) s.prompt = open + s.prompt + close;
    EXPECT_EQ(prompt_schedule(open + "[a:b:3]" + close, 10), wrapped);

    const std::string too_deep = std::string(200000, '[') + "a:1" + std::string(200000, ']');
    try {
        prompt_schedule(too_deep, 10);
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
        EXPECT_NE(std::string(e.what()).find("nested"), std::string::npos) << e.what();
    }
    // At the same depth, a prompt the grammar rejects (a stray '|') is used as it is, as in the webui.
    const std::string rejected = too_deep + "|";
    EXPECT_EQ(prompt_schedule(rejected, 10), (std::vector<ScheduledPrompt>{{10, rejected}}));
}

TEST(PromptSchedule, StepsMustBePositive) {
    EXPECT_THROW(prompt_schedule("a", 0), Error);
    EXPECT_THROW(prompt_schedule("a", -3), Error);
}
