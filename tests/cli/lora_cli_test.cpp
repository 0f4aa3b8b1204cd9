// `kiln txt2img` with LoRA: the prompt's <lora:NAME:W> tags found in --lora-dir, --lora FILE[:W], what the PNG
// records ("Lora hashes", as AUTOMATIC1111), and the errors: no folder, no file, a LoRA for another model.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/cli_expectations.h"
#include "cli/run_process.h"
#include "cli/test_files.h"
#include "image/infotext.h"
#include "image/png.h"
#include "image/sha256.h"
#include "io/safetensors.h"

using namespace kiln::test;

namespace {

const std::string kSd15 = std::string(KILN_TEST_DATA) + "/sd15-mini/sd15-mini.safetensors";

ProcessResult txt2img(TempDir& tmp, const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"txt2img", "-m", kSd15, "-W", "64", "-H", "64", "--steps", "2", "--seed", "3",
                                     "-o", tmp.file("out.png"), "--quiet", "--device", "cpu"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_kiln(args);
}

// A kohya LoRA on one attention projection of sd15-mini's UNet and one of its text encoder, plus `extra` modules.
void write_lora(const std::string& path, const std::vector<std::string>& extra = {}) {
    auto values = [](kiln::Shape s, float step) {
        kiln::Tensor t(s);
        for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = step * float(i % 5 - 2);
        return t;
    };
    std::vector<std::pair<std::string, kiln::Tensor>> t = {
        {"lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q.lora_down.weight", values({2, 16}, 0.1f)},
        {"lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q.lora_up.weight", values({16, 2}, 0.1f)},
        {"lora_te_text_model_encoder_layers_0_self_attn_q_proj.lora_down.weight", values({2, 32}, 0.1f)},
        {"lora_te_text_model_encoder_layers_0_self_attn_q_proj.lora_up.weight", values({32, 2}, 0.1f)}};
    for (const std::string& m : extra) {
        t.push_back({m + ".lora_down.weight", values({2, 16}, 0.1f)});
        t.push_back({m + ".lora_up.weight", values({16, 2}, 0.1f)});
    }
    kiln::write_safetensors(path, t, kiln::DType::F16, {{"ss_output_name", "grain"}});
}

std::string parameter(const std::string& png, const std::string& key) {
    for (const auto& [k, text] : kiln::read_png_text(png))
        if (k == "parameters")
            for (const auto& [name, value] : kiln::parse_infotext(text).params)
                if (name == key) return value;
    return "";
}

}  // namespace

TEST(LoraCli, TagWithoutFolderOrFileIsOneErrorLine) {
    TempDir tmp;
    expect_one_error_line(txt2img(tmp, {"-p", "a cat <lora:grain:0.7>"}), {"<lora:grain:0.7>", "--lora-dir"});
    expect_one_error_line(txt2img(tmp, {"-p", "a cat <lora:grain:0.7>", "--lora-dir", tmp.path().string()}),
                          {"no LoRA named 'grain'"});
    expect_one_error_line(txt2img(tmp, {"-p", "a cat <lora:grain:x>", "--lora-dir", tmp.path().string()}),
                          {"'x' is not a finite number"});
    expect_one_error_line(txt2img(tmp, {"-p", "a cat", "--lora", tmp.file("none.safetensors:0.5")}),
                          {"no such file", "none.safetensors"});
}

TEST(LoraCli, TagMergesTheLoraAndThePngRecordsItsHash) {
    TempDir tmp;
    std::filesystem::create_directories(tmp.path() / "loras" / "styles");
    const std::string lora = (tmp.path() / "loras" / "styles" / "grain.safetensors").string();
    write_lora(lora);
    const FileSnapshot lora_before = FileSnapshot::of(lora), model_before = FileSnapshot::of(kSd15);
    expect_success(txt2img(tmp, {"-p", "a cat"}));
    const std::string plain = read_bytes(tmp.file("out.png"));
    const ProcessResult r = txt2img(tmp, {"-p", "a cat <lora:grain:0.7>", "--lora-dir", (tmp.path() / "loras").string()});
    expect_success(r);
    EXPECT_NE(read_bytes(tmp.file("out.png")), plain) << "the LoRA changed nothing";
    // A1111's "Lora hashes": the SHA-256 of the bytes after the safetensors header, 12 hex digits.
    const std::string bytes = read_bytes(lora);
    uint64_t header = 0;
    for (int i = 7; i >= 0; --i) header = header << 8 | uint8_t(bytes[size_t(i)]);
    write_bytes(tmp.file("data.bin"), bytes.substr(8 + header));
    EXPECT_EQ(parameter(tmp.file("out.png"), "Lora hashes"), "grain: " + kiln::sha256_file_hex(tmp.file("data.bin")).substr(0, 12));
    bool kept = false;  // the prompt is recorded as written, tag included
    for (const auto& [k, text] : kiln::read_png_text(tmp.file("out.png")))
        kept = kept || (k == "parameters" && kiln::parse_infotext(text).prompt == "a cat <lora:grain:0.7>");
    EXPECT_TRUE(kept);
    EXPECT_TRUE(FileSnapshot::of(lora) == lora_before) << "kiln modified the LoRA file";
    EXPECT_TRUE(FileSnapshot::of(kSd15) == model_before) << "kiln modified the model";
    // --lora FILE:0.7 merges the same numbers: the same pixels, the same hash.
    const kiln::Image tagged = kiln::read_png(tmp.file("out.png"));
    const std::string hashes = parameter(tmp.file("out.png"), "Lora hashes");
    expect_success(txt2img(tmp, {"-p", "a cat", "--lora", lora + ":0.7"}));
    EXPECT_TRUE(kiln::read_png(tmp.file("out.png")).pixels == tagged.pixels);
    EXPECT_EQ(parameter(tmp.file("out.png"), "Lora hashes"), hashes);
}

// Quantized weights (--weights q8_0) are quantized after the merge: the LoRA still changes the image.
TEST(LoraCli, MergesBeforeQuantizing) {
    TempDir tmp;
    write_lora(tmp.file("grain.safetensors"));
    expect_success(txt2img(tmp, {"-p", "a cat", "--weights", "q8_0"}));
    const kiln::Image plain = kiln::read_png(tmp.file("out.png"));
    expect_success(txt2img(tmp, {"-p", "a cat", "--weights", "q8_0", "--lora", tmp.file("grain.safetensors")}));
    EXPECT_FALSE(kiln::read_png(tmp.file("out.png")).pixels == plain.pixels);
}

TEST(LoraCli, UnmatchedModulesAreANoticeAndAForeignLoraAnError) {
    TempDir tmp;
    write_lora(tmp.file("partial.safetensors"), {"lora_unet_no_such_layer"});
    const ProcessResult r = txt2img(tmp, {"-p", "a cat", "--lora", tmp.file("partial.safetensors")});
    expect_success(r);
    EXPECT_NE(r.err.find("1 modules or tensors match no layer of this model and are skipped"), std::string::npos)
        << r.describe();
    EXPECT_NE(r.err.find("lora_unet_no_such_layer"), std::string::npos) << r.describe();
    // Only modules of another architecture (SDXL's second encoder): nothing matches.
    kiln::write_safetensors(tmp.file("xl.safetensors"),
                            {{"lora_te2_text_model_encoder_layers_0_mlp_fc1.lora_down.weight", kiln::Tensor({2, 32})},
                             {"lora_te2_text_model_encoder_layers_0_mlp_fc1.lora_up.weight", kiln::Tensor({64, 2})}});
    expect_one_error_line(txt2img(tmp, {"-p", "a cat", "--lora", tmp.file("xl.safetensors")}),
                          {"none of its 1 modules matches"});
    // A module whose shape is not its layer's.
    kiln::write_safetensors(tmp.file("shape.safetensors"),
                            {{"lora_te_text_model_encoder_layers_0_mlp_fc1.lora_down.weight", kiln::Tensor({2, 16})},
                             {"lora_te_text_model_encoder_layers_0_mlp_fc1.lora_up.weight", kiln::Tensor({64, 2})}});
    expect_one_error_line(txt2img(tmp, {"-p", "a cat", "--lora", tmp.file("shape.safetensors")}),
                          {"lora_te_text_model_encoder_layers_0_mlp_fc1", "has shape"});
}

// The webui's alias lookup: a tag may name the file's ss_output_name ("grain" for film.safetensors), and the
// PNG records the name as written; the LoRA merged is the file's, so the latents are those of its file name.
TEST(LoraCli, TagFindsAFileByItsAlias) {
    TempDir tmp;
    std::filesystem::create_directories(tmp.path() / "loras");
    write_lora((tmp.path() / "loras" / "film.safetensors").string());  // ss_output_name "grain"
    const std::string dir = (tmp.path() / "loras").string();
    expect_success(txt2img(tmp, {"-p", "a cat <lora:grain:0.7>", "--lora-dir", dir, "--latents-out", tmp.file("alias.safetensors")}));
    EXPECT_EQ(parameter(tmp.file("out.png"), "Lora hashes").rfind("grain: ", 0), 0u);
    expect_success(txt2img(tmp, {"-p", "a cat <lora:film:0.7>", "--lora-dir", dir, "--latents-out", tmp.file("name.safetensors")}));
    EXPECT_EQ(parameter(tmp.file("out.png"), "Lora hashes").rfind("film: ", 0), 0u);
    const kiln::Tensor a = kiln::SafetensorsFile::open(tmp.file("alias.safetensors")).load("latents");
    const kiln::Tensor b = kiln::SafetensorsFile::open(tmp.file("name.safetensors")).load("latents");
    EXPECT_EQ(a.values(), b.values());
}
