#include <gtest/gtest.h>
#include <png.h>

#include "image/infotext.h"
#include "image/png.h"
#include "image_test_support.h"
#include "kiln/error.h"

using namespace kiln;
using namespace kiln::test;

namespace {

const Image kPixel{1, 1, 3, {1, 2, 3}};

bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

// An API-format ComfyUI graph as its default text-to-image workflow saves it (`prompt` chunk).
const char* const kComfyPrompt = R"({
  "3": {"inputs": {"seed": 156680208700286, "steps": 20, "cfg": 8.0, "sampler_name": "euler",
                   "scheduler": "normal", "denoise": 1.0, "model": ["4", 0], "positive": ["6", 0],
                   "negative": ["7", 0], "latent_image": ["5", 0]}, "class_type": "KSampler"},
  "4": {"inputs": {"ckpt_name": "v1-5-pruned-emaonly.safetensors"}, "class_type": "CheckpointLoaderSimple"},
  "6": {"inputs": {"text": "beautiful scenery nature glass bottle landscape, \u5b87\u5b99", "clip": ["4", 1]},
        "class_type": "CLIPTextEncode"},
  "7": {"inputs": {"text": "text, watermark", "clip": ["4", 1]}, "class_type": "CLIPTextEncode"}
})";

// The UI-format graph (`workflow` chunk): widget values are positional.
const char* const kComfyWorkflow = R"({"last_node_id": 9, "nodes": [
  {"id": 6, "type": "CLIPTextEncode", "widgets_values": ["a red fox in snow"]},
  {"id": 3, "type": "KSampler", "widgets_values": [42, "randomize", 25, 6.5, "dpmpp_2m", "karras", 1]},
  {"id": 9, "type": "SaveImage", "widgets_values": ["ComfyUI"]}]})";

}  // namespace

TEST(DescribePng, A1111Parameters) {
    TempDir dir;
    const std::string path = dir.file("a1111.png");
    GenerationParameters p;
    p.prompt = "a castle,\nat dusk";
    p.negative_prompt = "blurry";
    p.params = {{"Steps", "20"}, {"Sampler", "DPM++ 2M"}, {"Size", "512x768"}, {"Lora hashes", "x: 0123456789ab"}};
    write_png(path, kPixel, {{"parameters", format_infotext(p)}});
    const std::string d = describe_png_parameters(path);
    EXPECT_TRUE(contains(d, "Source: AUTOMATIC1111-style parameters\n")) << d;
    EXPECT_TRUE(contains(d, "Prompt: a castle,\n  at dusk\n")) << d;
    EXPECT_TRUE(contains(d, "Negative prompt: blurry\n")) << d;
    EXPECT_TRUE(contains(d, "Steps: 20\nSampler: DPM++ 2M\nSize: 512x768\nLora hashes: x: 0123456789ab\n")) << d;
}

TEST(DescribePng, StableDiffusionCppRawUtf8Text) {
    TempDir dir;
    const std::string path = dir.file("sdcpp.png");
    RawPng raw = raw_png(1, 1, 8, PNG_COLOR_TYPE_GRAY);
    raw.rows = {{0}};
    // stable-diffusion.cpp puts UTF-8 bytes straight into tEXt.
    raw.texts = {{"parameters",
                  "\xE5\xAE\x87\xE5\xAE\x99 cat\nSteps: 20, CFG scale: 7.000000, Seed: 42, Size: 512x512, "
                  "Model: sd15.safetensors, RNG: cuda, Sampler: euler_a discrete, Version: stable-diffusion.cpp",
                  PNG_TEXT_COMPRESSION_NONE}};
    ASSERT_TRUE(write_raw_png(path, raw));
    const std::string d = describe_png_parameters(path);
    EXPECT_TRUE(contains(d, "Source: stable-diffusion.cpp parameters\n")) << d;
    EXPECT_TRUE(contains(d, "Prompt: \xE5\xAE\x87\xE5\xAE\x99 cat\n")) << d;
    EXPECT_TRUE(contains(d, "CFG scale: 7.000000\n")) << d;
    EXPECT_TRUE(contains(d, "Sampler: euler_a discrete\n")) << d;
    EXPECT_FALSE(contains(d, "Negative prompt")) << d;
}

TEST(DescribePng, ComfyUiPromptGraph) {
    TempDir dir;
    const std::string path = dir.file("comfy.png");
    write_png(path, kPixel, {{"prompt", kComfyPrompt}, {"workflow", kComfyWorkflow}});
    const std::string d = describe_png_parameters(path);
    EXPECT_TRUE(contains(d, "Source: ComfyUI workflow\n")) << d;
    EXPECT_TRUE(contains(d, "[6] CLIPTextEncode.text: beautiful scenery nature glass bottle landscape, 宇宙\n")) << d;
    EXPECT_TRUE(contains(d, "[7] CLIPTextEncode.text: text, watermark\n")) << d;
    EXPECT_TRUE(contains(d, "KSampler [3]: seed 156680208700286, steps 20, cfg 8.0, sampler_name euler, "
                            "scheduler normal, denoise 1.0\n")) << d;
    EXPECT_FALSE(contains(d, "red fox")) << d;  // the API graph wins over the UI graph
}

TEST(DescribePng, ComfyUiWorkflowOnlyAndMalformedJson) {
    TempDir dir;
    const std::string path = dir.file("wf.png");
    write_png(path, kPixel, {{"prompt", "{not json"}, {"workflow", kComfyWorkflow}});
    std::string d = describe_png_parameters(path);
    EXPECT_TRUE(contains(d, "(the prompt chunk is not valid JSON)\n")) << d;
    EXPECT_TRUE(contains(d, "[6] CLIPTextEncode.text: a red fox in snow\n")) << d;
    EXPECT_TRUE(contains(d, "KSampler [3]: seed 42, steps 25, cfg 6.5, sampler_name dpmpp_2m\n")) << d;

    // Wrong shapes everywhere, and nesting deep enough to overflow a recursive walker.
    const std::string deep = std::string(200000, '[') + std::string(200000, ']');
    write_png(path, kPixel,
              {{"prompt", R"({"1": {"class_type": "KSampler", "inputs": {"seed": [[1]], "steps": {"a": 1}}},
                              "2": {"class_type": 5}, "3": [], "4": {"class_type": "CLIPTextEncode", "inputs": []}})"},
               {"workflow", deep}});
    d = describe_png_parameters(path);
    EXPECT_TRUE(contains(d, "KSampler [1]: seed (not a plain value), steps (not a plain value)\n")) << d;
    write_png(path, kPixel, {{"workflow", deep}});
    d = describe_png_parameters(path);
    EXPECT_TRUE(contains(d, "(no CLIPTextEncode or KSampler nodes found)")) << d;
}

TEST(DescribePng, NoParametersIsAnError) {
    TempDir dir;
    const std::string path = dir.file("plain.png");
    for (const TextChunks& text : {TextChunks{}, TextChunks{{"Software", "GIMP"}}}) {
        write_png(path, kPixel, text);
        try {
            describe_png_parameters(path);
            ADD_FAILURE() << "no error";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
            EXPECT_EQ(std::string(e.what()), "no generation parameters in " + path);
        }
    }
    EXPECT_THROW(describe_png_parameters(dir.file("missing.png")), Error);
}

TEST(DescribePng, ParametersWithoutASettingsLine) {
    TempDir dir;
    const std::string path = dir.file("prompt-only.png");
    write_png(path, kPixel, {{"parameters", "just a prompt"}});
    const std::string d = describe_png_parameters(path);
    EXPECT_TRUE(contains(d, "Prompt: just a prompt\n")) << d;
    EXPECT_TRUE(contains(d, "(no settings line found after the prompt)")) << d;
}
