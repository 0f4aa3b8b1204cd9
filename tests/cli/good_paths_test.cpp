// `kiln` used as intended with the sd15-mini single file: txt2img writes a PNG whose `parameters`
// text has AUTOMATIC1111's layout, --batch-count counts seeds up, `kiln info` reads images and
// models, img2img runs, and A1111 sampler labels are accepted.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cli/cli_expectations.h"
#include "cli/run_process.h"
#include "cli/test_files.h"
#include "image/png.h"

using namespace kiln::test;
namespace fs = std::filesystem;

namespace {

const std::string kSd15 = std::string(KILN_TEST_DATA) + "/sd15-mini/sd15-mini.safetensors";
const std::string kPrompt = "a photo of an astronaut riding a horse on mars";
const std::string kNegative = "blurry, low quality";

using KeyValues = std::vector<std::pair<std::string, std::string>>;

// The PNG's `parameters` text split into prompt lines and the key/value line. Written here rather
// than taken from the library's parser so that a bug there cannot hide one in the writer. Values
// in these tests contain no ',' or ':' (A1111 would quote those), so ", " and ": " split them.
struct Infotext {
    std::vector<std::string> lines;
    KeyValues params;
};

Infotext read_infotext(const std::string& png) {
    Infotext info;
    std::string text;
    for (const auto& [key, value] : kiln::read_png_text(png))
        if (key == "parameters") text = value;
    size_t start = 0;
    while (start <= text.size()) {
        size_t nl = text.find('\n', start);
        if (nl == std::string::npos) nl = text.size();
        info.lines.push_back(text.substr(start, nl - start));
        start = nl + 1;
    }
    const std::string& last = info.lines.back();
    start = 0;
    while (start < last.size()) {
        size_t end = last.find(", ", start);
        if (end == std::string::npos) end = last.size();
        const std::string item = last.substr(start, end - start);
        const size_t colon = item.find(": ");
        if (colon == std::string::npos) info.params.push_back({item, ""});
        else info.params.push_back({item.substr(0, colon), item.substr(colon + 2)});
        start = end + 2;
    }
    return info;
}

std::string param(const Infotext& info, const std::string& key) {
    for (const auto& [k, v] : info.params)
        if (k == key) return v;
    return "<absent>";
}

// An independent SHA-256 (coreutils), not the library's, for the model hash.
std::string sha256sum(const std::string& path) {
    std::unique_ptr<FILE, int (*)(FILE*)> p(popen(("sha256sum '" + path + "'").c_str(), "r"), pclose);
    char buf[65] = {};
    if (!p || std::fread(buf, 1, 64, p.get()) != 64) return "";
    return std::string(buf, 64);
}

std::vector<std::string> stdout_lines(const ProcessResult& r) {
    std::vector<std::string> lines;
    size_t start = 0;
    while (start < r.out.size()) {
        size_t nl = r.out.find('\n', start);
        if (nl == std::string::npos) nl = r.out.size();
        lines.push_back(r.out.substr(start, nl - start));
        start = nl + 1;
    }
    return lines;
}

class GoodPaths : public testing::Test {
protected:
    // One txt2img run (the fixture's DDIM call) that several tests look at.
    static void SetUpTestSuite() {
        tmp_ = new TempDir;
        image_ = tmp_->file("astronaut.png");
        run_ = new ProcessResult(run_kiln({"txt2img", "-m", kSd15, "-p", kPrompt, "-n", kNegative, "-W", "128", "-H",
                                           "128", "--steps", "6", "--cfg-scale", "7.5", "--seed", "42", "--rng",
                                           "cpu", "--sampler", "ddim", "-o", image_}));
    }
    static void TearDownTestSuite() {
        delete run_;
        delete tmp_;
    }

    // A quick run with extra arguments; returns the parameters of the image it wrote.
    Infotext quick_txt2img(const std::vector<std::string>& extra) {
        const std::string out = tmp.file("quick.png");
        std::vector<std::string> args = {"txt2img", "-m", kSd15, "-p", "a red circle", "-W", "64", "-H", "64",
                                         "--steps", "3", "--seed", "7", "-o", out, "--quiet"};
        args.insert(args.end(), extra.begin(), extra.end());
        const ProcessResult r = run_kiln(args);
        EXPECT_TRUE(r.exited && r.exit_code == 0) << r.describe();
        EXPECT_TRUE(fs::exists(out));
        return fs::exists(out) ? read_infotext(out) : Infotext{};
    }

    static TempDir* tmp_;
    static std::string image_;
    static ProcessResult* run_;
    TempDir tmp;
};

TempDir* GoodPaths::tmp_ = nullptr;
std::string GoodPaths::image_;
ProcessResult* GoodPaths::run_ = nullptr;

}  // namespace

TEST_F(GoodPaths, Txt2imgWritesThePngAndSaysWhere) {
    expect_success(*run_);
    EXPECT_EQ(stdout_lines(*run_), std::vector<std::string>{image_});
    EXPECT_EQ(run_->err, "") << "stderr is not a terminal: no progress bar expected";
    const kiln::Image img = kiln::read_png(image_);
    EXPECT_EQ(img.width, 128);
    EXPECT_EQ(img.height, 128);
}

TEST_F(GoodPaths, ParametersHaveTheA1111Layout) {
    expect_success(*run_);
    const Infotext info = read_infotext(image_);
    ASSERT_EQ(info.lines.size(), 3u);
    EXPECT_EQ(info.lines[0], kPrompt);
    EXPECT_EQ(info.lines[1], "Negative prompt: " + kNegative);

    // Key order from /work/shared/A1111-PARAMETERS.md (create_infotext); "Schedule type" may follow the
    // sampler ("Automatic" for one with no schedule choice), kiln's own keys may come before Version.
    std::vector<std::string> keys;
    for (const auto& [k, v] : info.params)
        if (k != "Schedule type") keys.push_back(k);
    const std::vector<std::string> expected_keys = {"Steps", "Sampler", "CFG scale", "Seed",   "Size",
                                                    "Model hash", "Model", "RNG",     "Version"};
    EXPECT_EQ(keys, expected_keys) << info.lines.back();
    EXPECT_EQ(param(info, "Steps"), "6");
    EXPECT_EQ(param(info, "Sampler"), "DDIM");
    EXPECT_EQ(param(info, "CFG scale"), "7.5");
    EXPECT_EQ(param(info, "Seed"), "42");
    EXPECT_EQ(param(info, "Size"), "128x128");
    const std::string sha = sha256sum(kSd15);
    ASSERT_EQ(sha.size(), 64u);
    EXPECT_EQ(param(info, "Model hash"), sha.substr(0, 10));
    EXPECT_EQ(param(info, "Model"), "sd15-mini");
    EXPECT_EQ(param(info, "RNG"), "CPU");
    EXPECT_EQ(info.params.back().first, "Version");
    EXPECT_EQ(param(info, "Version").rfind("kiln", 0), 0u) << param(info, "Version");
}

TEST_F(GoodPaths, BatchCountWritesOneFilePerSeed) {
    const std::string out = tmp.file("batch.png");
    const ProcessResult r = run_kiln({"txt2img", "-m", kSd15, "-p", "a blue square", "-W", "64", "-H", "64", "--steps",
                                      "2", "--seed", "1000", "--batch-count", "2", "-o", out, "--quiet"});
    expect_success(r);
    const std::vector<std::string> files = stdout_lines(r);
    ASSERT_EQ(files.size(), 2u) << r.out;
    EXPECT_NE(files[0], files[1]);
    ASSERT_TRUE(fs::exists(files[0]));
    ASSERT_TRUE(fs::exists(files[1]));
    EXPECT_EQ(param(read_infotext(files[0]), "Seed"), "1000");
    EXPECT_EQ(param(read_infotext(files[1]), "Seed"), "1001");
    EXPECT_NE(kiln::read_png(files[0]).pixels, kiln::read_png(files[1]).pixels) << "two seeds, one image";
}

TEST_F(GoodPaths, SameSeedSameImage) {
    const std::string a = tmp.file("a.png"), b = tmp.file("b.png");
    for (const std::string& out : {a, b})
        expect_success(run_kiln({"txt2img", "-m", kSd15, "-p", "a blue square", "-W", "64", "-H", "64", "--steps",
                                 "2", "--seed", "5", "-o", out, "--quiet"}));
    EXPECT_EQ(kiln::read_png(a).pixels, kiln::read_png(b).pixels);
}

TEST_F(GoodPaths, InfoOnThePngPrintsThePrompt) {
    expect_success(*run_);
    const ProcessResult r = run_kiln({"info", image_});
    expect_success(r);
    EXPECT_NE(r.out.find(kPrompt), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(kNegative), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("42"), std::string::npos) << r.out;
    EXPECT_EQ(r.err, "");
}

TEST_F(GoodPaths, InfoOnModelsPrintsTheArchitecture) {
    const std::pair<std::string, std::string> cases[] = {
        {"sd15-mini/sd15-mini.safetensors", "SD 1.x"}, {"sd2-mini/sd2-mini.safetensors", "SD 2.x"},
        {"sdxl-mini/sdxl-mini.safetensors", "SDXL"},   {"sd15-mini/diffusers", "SD 1.x"},
        {"sdxl-mini/diffusers", "SDXL"}};
    for (const auto& [rel, arch] : cases) {
        const ProcessResult r = run_kiln({"info", std::string(KILN_TEST_DATA) + "/" + rel});
        expect_success(r);
        EXPECT_NE(r.out.find(arch), std::string::npos) << rel << ":\n" << r.out;
    }
}

TEST_F(GoodPaths, Img2imgRuns) {
    expect_success(*run_);
    const FileSnapshot init_before = FileSnapshot::of(image_);
    const std::string out = tmp.file("img2img.png");
    const ProcessResult r = run_kiln({"img2img", "-m", kSd15, "-p", "a red circle", "-i", image_, "--strength", "0.6",
                                      "--steps", "4", "--seed", "3", "-o", out, "--quiet"});
    expect_success(r);
    EXPECT_TRUE(FileSnapshot::of(image_) == init_before) << "img2img modified its init image";
    ASSERT_TRUE(fs::exists(out));
    const kiln::Image img = kiln::read_png(out);
    EXPECT_EQ(img.width, 128);  // the init image's size
    EXPECT_EQ(img.height, 128);
    const Infotext info = read_infotext(out);
    EXPECT_EQ(param(info, "Denoising strength"), "0.6");
    EXPECT_EQ(param(info, "Size"), "128x128");
}

TEST_F(GoodPaths, A1111DpmPlusPlus2MKarras) {
    const Infotext info = quick_txt2img({"--sampler", "DPM++ 2M", "--scheduler", "karras"});
    EXPECT_EQ(param(info, "Sampler"), "DPM++ 2M");
    EXPECT_EQ(param(info, "Schedule type"), "Karras");
}

TEST_F(GoodPaths, A1111EulerA) {
    const Infotext info = quick_txt2img({"--sampler", "Euler a"});
    EXPECT_EQ(param(info, "Sampler"), "Euler a");
}

TEST_F(GoodPaths, A1111PlmsIsPndm) {
    const Infotext info = quick_txt2img({"--sampler", "PLMS"});
    EXPECT_EQ(param(info, "Sampler"), "PLMS");
}

TEST_F(GoodPaths, DefaultSamplerOfAnSd1SingleFileIsPndm) {
    // diffusers' SD 1.5 scheduler config is PNDMScheduler, whose A1111 label is PLMS.
    const Infotext info = quick_txt2img({});
    EXPECT_EQ(param(info, "Sampler"), "PLMS");
}

TEST_F(GoodPaths, DiffusersFolderHasNoModelHash) {
    // A1111's hash is of a checkpoint file; a folder has none, so the key is absent.
    const std::string out = tmp.file("folder.png");
    expect_success(run_kiln({"txt2img", "-m", std::string(KILN_TEST_DATA) + "/sd15-mini/diffusers", "-p", "a circle",
                             "-W", "64", "-H", "64", "--steps", "2", "-o", out, "--quiet"}));
    const Infotext info = read_infotext(out);
    EXPECT_EQ(param(info, "Model hash"), "<absent>");
    EXPECT_EQ(param(info, "Model"), "diffusers");
}

TEST_F(GoodPaths, CudaRngIsNotMarkedCpu) {
    // A1111 writes RNG only when it is not its GPU default.
    const Infotext info = quick_txt2img({"--rng", "cuda"});
    EXPECT_EQ(param(info, "RNG"), "<absent>");
}

// Without -W/-H a diffusers folder gives its UNet's native size: sample_size (16 in the fixture's
// unet/config.json) times the VAE's factor 8, as diffusers' pipelines do.
TEST(DefaultSize, DiffusersFolderUsesItsSampleSize) {
    TempDir tmp;
    const std::string out = tmp.file("native.png");
    const ProcessResult r = run_kiln({"txt2img", "-m", std::string(KILN_TEST_DATA) + "/sd15-mini/diffusers", "-p",
                                      "a red circle", "--steps", "1", "-o", out, "--quiet"});
    expect_success(r);
    const kiln::Image img = kiln::read_png(out);
    EXPECT_EQ(img.width, 128);
    EXPECT_EQ(img.height, 128);
}

// The fixture's weights are fp16: kept as fp16 (the default) or converted to float32 at load, the
// products see the same float32 values, so the pixels are identical; bf16 rounds the weights again
// and still makes an image of the requested size.
TEST(WeightsOption, Fp16FileGivesTheSamePixelsKeptOrConvertedToFloat32) {
    TempDir tmp;
    auto generate = [&](const std::string& name, const std::vector<std::string>& extra) {
        const std::string out = tmp.file(name);
        std::vector<std::string> args = {"txt2img", "-m", kSd15, "-p", "a circle", "-W", "72", "-H", "48",
                                         "--steps", "3", "--seed", "5", "-o", out, "--quiet"};
        args.insert(args.end(), extra.begin(), extra.end());
        expect_success(run_kiln(args));
        return kiln::read_png(out);
    };
    const kiln::Image stored = generate("stored.png", {}), f32 = generate("f32.png", {"--weights", "f32"});
    const kiln::Image bf16 = generate("bf16.png", {"--weights", "bf16"});
    EXPECT_EQ(stored.pixels, f32.pixels);
    EXPECT_EQ(bf16.width, 72);
    EXPECT_EQ(bf16.height, 48);
}
