// The kiln program with a .ckpt model (info and txt2img as for its .safetensors; a malicious one refused in
// one line, the file untouched) and with --embeddings-dir (the PNG records AUTOMATIC1111's "TI hashes").
#include <gtest/gtest.h>

#include "cli/cli_expectations.h"
#include "cli/run_process.h"
#include "cli/test_files.h"
#include "image/png.h"
#include "image/sha256.h"
#include "io/ckpt_test_writer.h"
#include "io/safetensors.h"

using namespace kiln;
using namespace kiln::test;

namespace {

const std::string kSd15 = std::string(KILN_TEST_DATA) + "/sd15-mini/sd15-mini.safetensors";

// sd15-mini as a training checkpoint (tensors under 'state_dict').
std::string sd15_ckpt() { return ckpt_bytes(ckpt_tensors(SafetensorsFile::open(kSd15))); }

std::vector<std::string> txt2img(const std::string& model, const std::string& out, const std::string& prompt) {
    return {"txt2img", "-m", model, "-W", "64", "-H", "64", "--steps", "2", "--seed", "3", "-p", prompt, "-o", out, "--quiet"};
}

}  // namespace

TEST(CkptCli, InfoAndTxt2imgAsTheSafetensors) {
    TempDir tmp;
    const std::string ckpt = tmp.file("sd15-mini.ckpt");
    write_bytes(ckpt, sd15_ckpt());
    const ProcessResult info = run_kiln({"info", ckpt});
    expect_success(info);
    EXPECT_NE(info.out.find("SD 1.x"), std::string::npos) << info.describe();
    expect_success(run_kiln(txt2img(ckpt, tmp.file("a.png"), "a cat")));
    expect_success(run_kiln(txt2img(kSd15, tmp.file("b.png"), "a cat")));
    // The same pixels (the PNGs' parameters differ only by the model's hash and name).
    EXPECT_EQ(read_png(tmp.file("a.png")).pixels, read_png(tmp.file("b.png")).pixels);
}

TEST(CkptCli, PickleThatWouldRunCodeIsOneErrorLine) {
    TempDir tmp;
    const std::string evil = tmp.file("evil.ckpt");
    // {'state_dict': os.system('id')} as pickle writes it on Linux (GLOBAL 'posix system', REDUCE).
    const std::string pkl = std::string("\x80\x02}X\x0a\x00\x00\x00state_dictcposix\nsystem\nX\x02\x00\x00\x00idq\x01\x85Rs.", 45);
    write_bytes(evil, ckpt_zip({{"archive/data.pkl", pkl}}, false));
    const FileSnapshot before = FileSnapshot::of(evil);
    expect_one_error_line(run_kiln(txt2img(evil, tmp.file("x.png"), "a cat")), {"evil.ckpt", "posix.system"});
    EXPECT_TRUE(FileSnapshot::of(evil) == before);
    EXPECT_FALSE(fs::exists(tmp.file("x.png")));
}

TEST(EmbeddingsCli, PngRecordsTiHashes) {
    TempDir tmp;
    fs::create_directories(tmp.file("emb"));
    const std::string emb = tmp.file("emb") + "/kilnstyle.safetensors";
    Tensor v({2, 32});
    for (int64_t i = 0; i < v.numel(); ++i) v[i] = float(i % 7) / 7.0f;
    write_safetensors(emb, {{"emb_params", v}});
    std::vector<std::string> args = txt2img(kSd15, tmp.file("t.png"), "a kilnstyle cat");
    args.insert(args.end(), {"--embeddings-dir", tmp.file("emb")});
    const ProcessResult r = run_kiln(args);
    expect_success(r);
    std::string params;
    for (const auto& [key, text] : read_png_text(tmp.file("t.png")))
        if (key == "parameters") params = text;
    const std::string want = "TI hashes: \"kilnstyle: " + sha256_file_hex(emb).substr(0, 12) + "\"";
    EXPECT_NE(params.find(want), std::string::npos) << params;
}
