#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>

#include "image/infotext.h"
#include "image/python_text.h"
#include "kiln/error.h"

using namespace kiln;

namespace {

using Params = std::vector<std::pair<std::string, std::string>>;

// The parameter line of the example in docs A1111-PARAMETERS.md ("Layout"), copied verbatim.
const char* const kSpecParameterLine =
    "Steps: 20, Sampler: DPM++ 2M, Schedule type: Karras, CFG scale: 7, Seed: 1234567890, Size: 512x768, "
    "Model hash: 6ce0161689, Model: v1-5-pruned-emaonly, Clip skip: 2, Version: v1.10.1";

GenerationParameters spec_example() {
    GenerationParameters p;
    p.prompt = "a photo of an astronaut riding a horse on mars,\nhighly detailed";
    p.negative_prompt = "blurry, lowres";
    p.params = {
        {"Steps", format_number(20)},
        {"Sampler", "DPM++ 2M"},
        {"Schedule type", "Karras"},
        {"CFG scale", format_number(7)},
        {"Seed", format_number(int64_t{1234567890})},
        {"Size", "512x768"},
        {"Model hash", "6ce0161689"},
        {"Model", "v1-5-pruned-emaonly"},
        {"Clip skip", format_number(2)},
        {"Version", "v1.10.1"},
    };
    return p;
}

}  // namespace

TEST(Infotext, FormatsTheSpecExampleByteForByte) {
    const GenerationParameters p = spec_example();
    EXPECT_EQ(format_infotext(p), p.prompt + "\nNegative prompt: " + p.negative_prompt + "\n" + kSpecParameterLine);
}

TEST(Infotext, OmitsAnEmptyNegativePromptAndStrips) {
    GenerationParameters p = spec_example();
    p.negative_prompt.clear();
    p.prompt = "  \n a cat \t";
    EXPECT_EQ(format_infotext(p), std::string("a cat \t\n") + kSpecParameterLine);
    p.params.clear();
    EXPECT_EQ(format_infotext(p), "a cat");
}

TEST(Infotext, QuotesValuesThatWouldBreakTheLine) {
    GenerationParameters p;
    p.prompt = "x";
    p.params = {
        {"Lora hashes", "add_detail: 7c6bad76eb54"},  // the WebUI writes Lora hashes: "add_detail: 7c6bad76eb54"
        {"Hires upscaler", "R-ESRGAN 4x+"},
        {"List", "a, b"},
        {"Multi", "line1\nline2"},
        {"Quote", "say \"hi\", then \\ go"},
        {"Unicode", "宇宙, 飛行士"},  // ensure_ascii=False: kept as UTF-8
        {"Plain unicode", "café"},
        {"Control", "a\x01:\t\r"},
        {"Tiling", "Tiling"},  // a value equal to its key is written bare
    };
    EXPECT_EQ(format_infotext(p),
              "x\nLora hashes: \"add_detail: 7c6bad76eb54\", Hires upscaler: R-ESRGAN 4x+, List: \"a, b\", "
              "Multi: \"line1\\nline2\", Quote: \"say \\\"hi\\\", then \\\\ go\", Unicode: \"宇宙, 飛行士\", "
              "Plain unicode: café, Control: \"a\\u0001:\\t\\r\", Tiling");
}

TEST(Infotext, RejectsKeysThatCannotBeRead) {
    for (const char* key : {"", "a,b", "a:b", "a\nb"}) {
        GenerationParameters p;
        p.params = {{key, "1"}};
        EXPECT_THROW(format_infotext(p), Error) << key;
    }
}

TEST(Infotext, ParsesMultiLinePromptsAndQuotedValues) {
    const std::string text =
        "masterpiece, 1girl,\n  (detailed:1.2) \nNegative prompt: lowres,\nbad hands\n"
        "Steps: 30, Sampler: DPM++ 2M Karras, CFG scale: 7.5, Seed: 42, Size: 512x768, "
        "Lora hashes: \"add_detail: 7c6bad76eb54, more: 0123456789ab\", Note: \"line1\\nline2 \\u00e9\", Version: v1.6.0";
    const GenerationParameters p = parse_infotext(text);
    EXPECT_EQ(p.prompt, "masterpiece, 1girl,\n(detailed:1.2)");
    EXPECT_EQ(p.negative_prompt, "lowres,\nbad hands");
    const Params expected = {
        {"Steps", "30"},
        {"Sampler", "DPM++ 2M Karras"},  // the old combined label is kept as written
        {"CFG scale", "7.5"},
        {"Seed", "42"},
        {"Size", "512x768"},
        {"Lora hashes", "add_detail: 7c6bad76eb54, more: 0123456789ab"},
        {"Note", "line1\nline2 é"},
        {"Version", "v1.6.0"},
    };
    EXPECT_EQ(p.params, expected);
}

TEST(Infotext, ParsesStableDiffusionCppText) {
    // The layout of stable-diffusion.cpp's get_image_params (std::to_string floats, "Sampler: <method> <schedule>").
    const std::string text =
        "a lovely cat, 宇宙\nNegative prompt: blurry\n"
        "Steps: 20, CFG scale: 7.000000, Guidance: 3.500000, Eta: 0.000000, Seed: 42, Size: 512x512, "
        "Model: v1-5-pruned-emaonly.safetensors, RNG: cuda, Sampler: euler_a discrete, Version: stable-diffusion.cpp";
    const GenerationParameters p = parse_infotext(text);
    EXPECT_EQ(p.prompt, "a lovely cat, 宇宙");
    EXPECT_EQ(p.negative_prompt, "blurry");
    const Params expected = {
        {"Steps", "20"},       {"CFG scale", "7.000000"}, {"Guidance", "3.500000"},
        {"Eta", "0.000000"},   {"Seed", "42"},            {"Size", "512x512"},
        {"Model", "v1-5-pruned-emaonly.safetensors"},     {"RNG", "cuda"},
        {"Sampler", "euler_a discrete"},                  {"Version", "stable-diffusion.cpp"},
    };
    EXPECT_EQ(p.params, expected);
}

TEST(Infotext, LastLineIsAPromptLineBelowThreeMatches) {
    GenerationParameters p = parse_infotext("a photo\nof a cat: cute, Style: soft");
    EXPECT_EQ(p.prompt, "a photo\nof a cat: cute, Style: soft");
    EXPECT_TRUE(p.params.empty());

    p = parse_infotext("ab, cd: e, fg: h, ij: k");  // a single line can be the parameter line alone
    EXPECT_EQ(p.prompt, "");
    EXPECT_EQ(p.params, (Params{{"cd", "e"}, {"fg", "h"}, {"ij", "k"}}));

    // The key pattern \w[\w \-/]+ needs two characters: one-letter keys never match.
    p = parse_infotext("x: 1, y: 2, z: 3");
    EXPECT_EQ(p.prompt, "x: 1, y: 2, z: 3");
    EXPECT_TRUE(p.params.empty());

    p = parse_infotext("");
    EXPECT_EQ(p.prompt, "");
    EXPECT_EQ(p.negative_prompt, "");
    EXPECT_TRUE(p.params.empty());

    p = parse_infotext("Negative prompt: only negative");
    EXPECT_EQ(p.prompt, "");
    EXPECT_EQ(p.negative_prompt, "only negative");
}

TEST(Infotext, FollowsTheWebUiOnOddValues) {
    const GenerationParameters p =
        parse_infotext("p\nSteps: 20 , Empty: , Seed: 1, Seed: 2, Bad: \"not \\x json\", Lone: \", Blank: \"\", Size: 8x8");
    const Params expected = {
        {"Steps", "20 "},                 // unquoted values keep their trailing spaces
        {"Seed", "2"},                    // a repeated key keeps its first place and its last value
        {"Bad", "\"not \\x json\""},      // a quoted value that is not JSON stays as written
        {"Lone", "\""},                   // (Empty: is skipped: the WebUI fails on its v[0])
        {"Blank", ""},
        {"Size", "8x8"},
    };
    EXPECT_EQ(p.params, expected);
}

TEST(Infotext, FormatThenParseRoundTrips) {
    GenerationParameters p;
    p.prompt = "line one, (weighted:1.3)\nline two: 宇宙飛行士 🚀";
    p.negative_prompt = "bad\nworse";
    p.params = {
        {"Steps", "25"},
        {"Sampler", "Euler a"},
        {"CFG scale", format_number(6.5)},
        {"Size", "768x512"},
        {"Hires upscaler", "Latent (nearest-exact)"},
        {"Lora hashes", "a: 0123456789ab, b: ba9876543210"},
        {"Wild", "q\"uote\\, colon: newline\n tab\t é 🚀"},
        {"Version", "kiln 0.1.0"},
    };
    const GenerationParameters back = parse_infotext(format_infotext(p));
    EXPECT_EQ(back.prompt, p.prompt);
    EXPECT_EQ(back.negative_prompt, p.negative_prompt);
    EXPECT_EQ(back.params, p.params);
}

TEST(Infotext, LongLinesParseInLinearTime) {
    // A 200k-character last line with no colon: a naive rescan from every start is quadratic.
    std::string text = "prompt\n" + std::string(200000, 'a') + ", " + std::string(200000, 'b');
    const auto start = std::chrono::steady_clock::now();
    const GenerationParameters p = parse_infotext(text);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_TRUE(p.params.empty());
    EXPECT_EQ(p.prompt.size(), text.size());
    EXPECT_LT(seconds, 1.0);
}

TEST(Infotext, UnicodeWhitespaceAndWordCharacters) {
    // Python's str.strip() removes U+3000 and U+00A0; \w covers accented and CJK letters.
    EXPECT_EQ(python_strip("\xE3\x80\x80\xC2\xA0 x y \n\xE3\x80\x80"), "x y");
    EXPECT_EQ(python_strip(" \t\n"), "");
    const GenerationParameters p = parse_infotext("p\nÉtape: 1, 步数: 2, Größe: 3");
    EXPECT_EQ(p.params, (Params{{"Étape", "1"}, {"步数", "2"}, {"Größe", "3"}}));
    // A key must start with a word character: an emoji or "-" cannot begin one.
    const GenerationParameters q = parse_infotext("p\n🚀xx: 1, -yy: 2, zz: 3");
    EXPECT_EQ(q.params, (Params{{"xx", "1"}, {"yy", "2"}, {"zz", "3"}}));
}

TEST(FormatNumber, PrintsLikePython) {
    // Expected strings are what CPython 3 prints for str(int) and repr(float) of the same values.
    EXPECT_EQ(format_number(7), "7");
    EXPECT_EQ(format_number(int64_t{-1234567890123}), "-1234567890123");
    EXPECT_EQ(format_number(uint64_t{18446744073709551615u}), "18446744073709551615");
    EXPECT_EQ(format_number(7.5), "7.5");
    EXPECT_EQ(format_number(7.0), "7.0");
    EXPECT_EQ(format_number(0.7), "0.7");
    EXPECT_EQ(format_number(0.1 + 0.2), "0.30000000000000004");
    EXPECT_EQ(format_number(1.0 / 3.0), "0.3333333333333333");
    EXPECT_EQ(format_number(double(0.7f)), "0.699999988079071");
    EXPECT_EQ(format_number(0.0), "0.0");
    EXPECT_EQ(format_number(-0.0), "-0.0");
    EXPECT_EQ(format_number(-2.5), "-2.5");
    EXPECT_EQ(format_number(0.0001), "0.0001");
    EXPECT_EQ(format_number(0.00001), "1e-05");
    EXPECT_EQ(format_number(2.5e-7), "2.5e-07");
    EXPECT_EQ(format_number(1e15), "1000000000000000.0");
    EXPECT_EQ(format_number(1e16), "1e+16");
    EXPECT_EQ(format_number(1234567890123456789.0), "1.2345678901234568e+18");
    EXPECT_EQ(format_number(123456.789), "123456.789");
    EXPECT_EQ(format_number(1.5e300), "1.5e+300");
    EXPECT_EQ(format_number(5e-324), "5e-324");
    EXPECT_EQ(format_number(std::numeric_limits<double>::infinity()), "inf");
    EXPECT_EQ(format_number(-std::numeric_limits<double>::infinity()), "-inf");
    EXPECT_EQ(format_number(std::nan("")), "nan");
}
