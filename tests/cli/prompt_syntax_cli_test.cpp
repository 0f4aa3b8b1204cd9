// `--prompt-syntax` and what `kiln txt2img` says about prompt parts it does not apply.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/cli_expectations.h"
#include "cli/run_process.h"
#include "cli/test_files.h"
#include "image/png.h"

using namespace kiln::test;

namespace {

const std::string kSd15 = std::string(KILN_TEST_DATA) + "/sd15-mini/sd15-mini.safetensors";

ProcessResult txt2img(TempDir& tmp, const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"txt2img", "-m", kSd15, "-W", "64", "-H", "64", "--steps", "1",
                                     "-o", tmp.file("out.png"), "--quiet"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_kiln(args);
}

TEST(PromptSyntaxCli, UnknownSyntaxIsOneErrorLine) {
    TempDir tmp;
    expect_one_error_line(txt2img(tmp, {"-p", "a cat", "--prompt-syntax", "comfy"}), {"--prompt-syntax"});
}

// LoRA tags are applied (tests/cli/lora_cli_test.cpp); other extra networks are reported and taken out.
TEST(PromptSyntaxCli, OtherNetworkTagsAreReportedNotEncoded) {
    TempDir tmp;
    const ProcessResult r = txt2img(tmp, {"-p", "a cat <hypernet:film_grain:0.7>", "-n", "ugly <lora:bad:1>"});
    expect_success(r);
    bool positive = false, negative = false;
    for (const std::string& line : r.err_lines()) {
        positive = positive || (line.find("<hypernet:film_grain:0.7> is not applied") != std::string::npos);
        negative = negative || (line.find("<lora:bad:1> in the negative prompt is read as words") != std::string::npos);
    }
    EXPECT_TRUE(positive) << r.describe();
    EXPECT_TRUE(negative) << r.describe();
    // The PNG keeps the prompt as the user wrote it, tag included, as the webui's infotext does.
    bool found = false;
    for (const auto& [key, value] : kiln::read_png_text(tmp.file("out.png"))) found = found || value.find("<hypernet:film_grain:0.7>") != std::string::npos;
    EXPECT_TRUE(found);
    // Without the syntax the tag is words, and nothing is said (a LoRA tag then needs no LoRA folder).
    const ProcessResult plain = txt2img(tmp, {"-p", "a cat <lora:film_grain:0.7>", "--prompt-syntax", "none"});
    expect_success(plain);
    EXPECT_EQ(plain.err.find("not applied"), std::string::npos) << plain.describe();
}

std::string parameters_of(const std::string& png) {
    for (const auto& [key, value] : kiln::read_png_text(png))
        if (key == "parameters") return value;
    return "";
}

TEST(PromptSyntaxCli, EmphasisModeIsRecordedAsTheWebuiRecordsIt) {
    TempDir tmp;
    expect_one_error_line(txt2img(tmp, {"-p", "a cat", "--emphasis", "comfy"}), {"--emphasis"});
    // A mode other than "Original" where an encoded text has '(' or '[' (make_emphasis_conditioning.py's
    // oracle has the rule's cases): "Emphasis: No norm" after the other extra parameters.
    expect_success(txt2img(tmp, {"-p", "a (cat)", "--emphasis", "no-norm"}));
    EXPECT_NE(parameters_of(tmp.file("out.png")).find(", Emphasis: No norm, Version: "), std::string::npos)
        << parameters_of(tmp.file("out.png"));
    expect_success(txt2img(tmp, {"-p", "a cat", "-n", "[blurry]", "--emphasis", "none"}));
    EXPECT_NE(parameters_of(tmp.file("out.png")).find(", Emphasis: None, "), std::string::npos);
    for (const std::vector<std::string>& args : {std::vector<std::string>{"-p", "a (cat)"},
                                                 std::vector<std::string>{"-p", "a cat", "--emphasis", "ignore"}}) {
        std::vector<std::string> a = args;
        expect_success(txt2img(tmp, a));
        EXPECT_EQ(parameters_of(tmp.file("out.png")).find("Emphasis"), std::string::npos);
    }
}

}  // namespace
