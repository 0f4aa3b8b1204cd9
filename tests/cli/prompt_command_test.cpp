// `kiln prompt` prints, as JSON, what AUTOMATIC1111 makes of a prompt: checked against the webui's own
// results (tests/data/prompt-syntax), with the built-in vocabulary, a diffusers folder's two tokenizers and
// single files; and its errors are one line.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/cli_expectations.h"
#include "cli/run_process.h"
#include "text/a1111_fixture.h"

using namespace kiln::test;
using nlohmann::json;

namespace {

const std::string kData = KILN_TEST_DATA;

json run_prompt(const std::vector<std::string>& args) {
    const ProcessResult r = run_kiln(args, std::chrono::seconds(60));
    EXPECT_TRUE(r.exited && r.exit_code == 0) << r.describe();
    EXPECT_TRUE(r.err.empty()) << r.err;
    return json::parse(r.out);
}

const json& fixture_case(const char* section, const std::string& prompt) {
    for (const json& c : a1111_fixture().at(section))
        if (c.at("prompt") == prompt) return c;
    ADD_FAILURE() << prompt << " not in the fixture's " << section;
    static const json none;
    return none;
}

// A chunk as kiln prints it against one of the fixture's (runs expanded; weights to the last bit).
void expect_chunk(const json& got, const json& want) {
    EXPECT_EQ(got.at("tokens"), want.at("tokens"));
    EXPECT_EQ(got.at("ids"), json(expand_runs(want.at("ids"))));
    const std::vector<json> weights = expand_runs(want.at("weights"));
    ASSERT_EQ(got.at("weights").size(), weights.size());
    for (size_t t = 0; t < weights.size(); ++t)
        EXPECT_TRUE(same_double(got.at("weights")[t].get<double>(), fixture_double(weights[t]))) << "token " << t;
}

}  // namespace

TEST(PromptCommand, ParsedAndSchedulesAreTheWebuis) {
    const std::string prompt = "[a:b:0.5] [c:d:0.5]";
    const json out = run_prompt({"prompt", "--steps", "4", prompt});
    EXPECT_EQ(out.at("parsed").size(), fixture_case("attention", prompt).at("parsed").size());
    const json& parsed = fixture_case("attention", prompt).at("parsed");
    for (size_t i = 0; i < parsed.size(); ++i) {
        EXPECT_EQ(out.at("parsed")[i][0], parsed[i][0]);
        EXPECT_TRUE(same_double(out.at("parsed")[i][1].get<double>(), fixture_double(parsed[i][1])));
    }
    const json& schedule = fixture_case("schedules", prompt);
    ASSERT_EQ(schedule.at("steps"), 4);
    ASSERT_EQ(schedule.at("outcomes").size(), 1u);
    EXPECT_EQ(out.at("schedules"), schedule.at("outcomes")[0]);
    // One entry of chunks per scheduled prompt, with the built-in vocabulary.
    ASSERT_EQ(out.at("text_encoders").size(), 1u);
    EXPECT_EQ(out.at("text_encoders")[0].at("name"), "builtin");
    EXPECT_EQ(out.at("text_encoders")[0].at("schedules").size(), out.at("schedules").size());
}

// SDXL's two tokenizers from a diffusers folder: the first pads with the end token, the second (pad "!")
// with 0, as the webui feeds its OpenCLIP encoder; both chunk as the webui does.
TEST(PromptCommand, ChunksOfBothSdxlEncodersAreTheWebuis) {
    // The first fixture prompt with several chunks that has both paddings.
    std::string prompt;
    for (const json& c : a1111_fixture().at("chunks"))
        if (c.at("pad") == "zero" && c.at("chunks").size() >= 2) {
            prompt = c.at("prompt").get<std::string>();
            break;
        }
    ASSERT_FALSE(prompt.empty());
    const json out = run_prompt({"prompt", "-m", kData + "/sdxl-mini/diffusers", prompt});
    ASSERT_EQ(out.at("text_encoders").size(), 2u);
    for (const json& encoder : out.at("text_encoders")) {
        const bool zero = encoder.at("name") == "text_encoder_2";
        SCOPED_TRACE(encoder.at("name").get<std::string>());
        EXPECT_EQ(encoder.at("pad_id"), zero ? 0 : 49407);
        json want;
        for (const json& c : a1111_fixture().at("chunks"))
            if (c.at("prompt") == prompt && c.at("pad") == (zero ? "zero" : "eos")) want = c;
        ASSERT_EQ(encoder.at("schedules").size(), 1u);  // no editing: one prompt for all 20 steps
        const json& got = encoder.at("schedules")[0];
        EXPECT_EQ(got.at("end_step"), 20);
        EXPECT_EQ(got.at("token_count"), want.at("token_count"));
        EXPECT_EQ(got.at("target"), want.at("target"));
        ASSERT_EQ(got.at("chunks").size(), want.at("chunks").size());
        for (size_t k = 0; k < want.at("chunks").size(); ++k) expect_chunk(got.at("chunks")[k], want.at("chunks")[k]);
    }
}

// Single files use the built-in vocabulary, with the pad token of each architecture's encoders.
TEST(PromptCommand, SingleFilesNameTheirEncoders) {
    const json sd15 = run_prompt({"prompt", "-m", kData + "/sd15-mini/sd15-mini.safetensors", "a cat"});
    ASSERT_EQ(sd15.at("text_encoders").size(), 1u);
    EXPECT_EQ(sd15.at("text_encoders")[0].at("pad_id"), 49407);
    const json sd2 = run_prompt({"prompt", "-m", kData + "/sd2-mini/sd2-mini.safetensors", "a cat"});
    ASSERT_EQ(sd2.at("text_encoders").size(), 1u);
    EXPECT_EQ(sd2.at("text_encoders")[0].at("pad_id"), 0);
}

TEST(PromptCommand, ErrorsAreOneLine) {
    // Python raises ValueError on this weight; kiln says which.
    expect_one_error_line(run_kiln({"prompt", "(a:1.2.3)"}), {"1.2.3"}, {"weight"});
    // A step beyond the doubles: Python's int() raises OverflowError.
    expect_one_error_line(run_kiln({"prompt", "[a:b:1e400]"}), {"1e400"}, {"step"});
    expect_one_error_line(run_kiln({"prompt", "--steps", "0", "a"}), {"--steps"});
    expect_one_error_line(run_kiln({"prompt", "-m", kData + "/no-such-model", "a"}), {"no-such-model"});
}
