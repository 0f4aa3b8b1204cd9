// `kiln txt2img` / `img2img` with arguments that cannot be honoured (sizes, steps, sampler names,
// init images): one clear error line naming the argument or file, a non-zero exit, no crash, no
// output image, and the model and init image left as they were.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <zlib.h>

#include "cli/cli_expectations.h"
#include "cli/run_process.h"
#include "cli/test_files.h"
#include "image/png.h"

using namespace kiln::test;
namespace fs = std::filesystem;

namespace {

const std::string kSd15 = std::string(KILN_TEST_DATA) + "/sd15-mini/sd15-mini.safetensors";

class BadArguments : public testing::Test {
protected:
    TempDir tmp;

    ProcessResult run(const std::string& command, const std::vector<std::string>& extra) {
        const FileSnapshot model_before = FileSnapshot::of(kSd15);
        const std::string out = tmp.file("out.png");
        std::vector<std::string> args = {command, "-m", kSd15, "-p", "a red circle", "-o", out, "--quiet"};
        args.insert(args.end(), extra.begin(), extra.end());
        ProcessResult r = run_kiln(args);
        EXPECT_FALSE(fs::exists(out)) << "a failed run wrote " << out;
        EXPECT_TRUE(FileSnapshot::of(kSd15) == model_before) << "kiln modified " << kSd15;
        return r;
    }
    ProcessResult txt2img(const std::vector<std::string>& extra) { return run("txt2img", extra); }

    // img2img from `init` (which must not change either).
    ProcessResult img2img(const std::string& init, const std::vector<std::string>& extra = {}) {
        const bool exists = fs::is_regular_file(init);
        FileSnapshot before;
        if (exists) before = FileSnapshot::of(init);
        std::vector<std::string> args = {"-i", init, "--steps", "4"};
        args.insert(args.end(), extra.begin(), extra.end());
        ProcessResult r = run("img2img", args);
        if (exists) {
            EXPECT_TRUE(FileSnapshot::of(init) == before) << "kiln modified the init image " << init;
        }
        return r;
    }

    // A valid 64x64 RGB PNG to start img2img from.
    std::string good_init_png(const std::string& name = "init.png") {
        kiln::Image img;
        img.width = img.height = 64;
        img.pixels.resize(64 * 64 * 3);
        for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<uint8_t>(i * 31);
        const std::string path = tmp.file(name);
        kiln::write_png(path, img, {});
        return path;
    }
};

}  // namespace

TEST_F(BadArguments, WidthNotAMultipleOf8) {
    expect_one_error_line(txt2img({"-W", "100", "-H", "64", "--steps", "1"}), {"width", "100"}, {"multiple of 8"});
}

TEST_F(BadArguments, HeightNotAMultipleOf8) {
    expect_one_error_line(txt2img({"-W", "64", "-H", "60", "--steps", "1"}), {"height", "60"}, {"multiple of 8"});
}

TEST_F(BadArguments, ZeroWidth) {
    expect_one_error_line(txt2img({"-W", "0", "-H", "64", "--steps", "1"}), {"width"});
}

TEST_F(BadArguments, NegativeHeight) {
    expect_one_error_line(txt2img({"-W", "64", "-H", "-64", "--steps", "1"}), {"height"});
}

TEST_F(BadArguments, ZeroSteps) {
    expect_one_error_line(txt2img({"-W", "64", "-H", "64", "--steps", "0"}), {"steps"});
}

TEST_F(BadArguments, NegativeSteps) {
    expect_one_error_line(txt2img({"-W", "64", "-H", "64", "--steps", "-3"}), {"steps"});
}

TEST_F(BadArguments, AbsurdSize) {
    expect_one_error_line(txt2img({"-W", "100000", "-H", "100000", "--steps", "1"}), {"100000"});
}

TEST_F(BadArguments, AbsurdWidthOnly) {
    expect_one_error_line(txt2img({"-W", "1048576", "-H", "64", "--steps", "1"}), {"width", "1048576"});
}

TEST_F(BadArguments, UnknownSampler) {
    expect_one_error_line(txt2img({"-W", "64", "-H", "64", "--steps", "1", "--sampler", "warp_drive"}),
                          {"warp_drive"}, {"sampler"});
}

TEST_F(BadArguments, UnknownScheduleType) {
    expect_one_error_line(
        txt2img({"-W", "64", "-H", "64", "--steps", "1", "--sampler", "DPM++ 2M", "--scheduler", "bumpy"}),
        {"bumpy"});
}

TEST_F(BadArguments, ZeroBatchCount) {
    expect_one_error_line(txt2img({"-W", "64", "-H", "64", "--steps", "1", "--batch-count", "0"}), {"batch count"});
}

TEST_F(BadArguments, ClipSkipZero) {
    expect_one_error_line(txt2img({"-W", "64", "-H", "64", "--steps", "1", "--clip-skip", "0"}), {"clip skip"});
}

TEST_F(BadArguments, InitImageOfGarbageBytes) {
    const std::string path = tmp.file("garbage.png");
    write_bytes(path, std::string(5000, '\x5a'));
    expect_one_error_line(img2img(path), {path});
}

TEST_F(BadArguments, InitImageTruncatedPng) {
    const std::string good = good_init_png("full.png");
    std::string bytes = read_bytes(good);
    const std::string path = tmp.file("truncated.png");
    write_bytes(path, bytes.substr(0, bytes.size() / 2));
    expect_one_error_line(img2img(path), {path});
}

TEST_F(BadArguments, InitImagePngSignatureOnly) {
    const std::string path = tmp.file("signature.png");
    write_bytes(path, std::string("\x89PNG\r\n\x1a\n", 8));
    expect_one_error_line(img2img(path), {path});
}

TEST_F(BadArguments, InitImageMissing) {
    const std::string path = tmp.file("no-such-image.png");
    expect_one_error_line(img2img(path), {path});
}

TEST_F(BadArguments, InitImageIsADirectory) {
    fs::create_directory(tmp.path() / "folder.png");
    const std::string path = (tmp.path() / "folder.png").string();
    expect_one_error_line(img2img(path), {path});
}

TEST_F(BadArguments, InitImageOfAnotherSize) {
    const std::string init = good_init_png();
    expect_one_error_line(img2img(init, {"-W", "128", "-H", "128"}), {init, "64x64"});
}

TEST_F(BadArguments, StrengthZero) {
    expect_one_error_line(img2img(good_init_png(), {"--strength", "0"}), {"strength"});
}

TEST_F(BadArguments, StrengthAboveOne) {
    expect_one_error_line(img2img(good_init_png(), {"--strength", "1.5"}), {"strength"});
}

// Usage errors caught by the option parser (CLI11) read like every other error: one
// "kiln: error:" line naming the option.
TEST_F(BadArguments, WidthNotANumber) {
    expect_one_error_line(txt2img({"-W", "abc", "-H", "64", "--steps", "1"}), {"--width", "abc"});
}

TEST_F(BadArguments, UnknownOption) {
    expect_one_error_line(txt2img({"-W", "64", "-H", "64", "--steps", "1", "--bogus"}), {"--bogus"});
}

TEST_F(BadArguments, UnknownRng) {
    expect_one_error_line(txt2img({"-W", "64", "-H", "64", "--steps", "1", "--rng", "gpu"}), {"--rng", "gpu"});
}

TEST_F(BadArguments, UnknownWeightsPrecision) {
    expect_one_error_line(txt2img({"-W", "64", "-H", "64", "--steps", "1", "--weights", "f8"}), {"--weights", "f8"});
}

TEST_F(BadArguments, OutputPathIsADirectory) {
    // The image is made, then cannot be put in place: the reason must be the system's ("Is a
    // directory"), and no temporary file may be left beside it.
    const std::string dir = tmp.file("taken");
    fs::create_directory(dir);
    const ProcessResult r = run_kiln({"txt2img", "-m", kSd15, "-p", "a red circle", "-W", "64", "-H", "64", "--steps",
                                      "1", "-o", dir, "--quiet"});
    expect_one_error_line(r, {dir}, {"is a directory"});
    EXPECT_TRUE(fs::is_directory(dir));
    EXPECT_EQ(std::distance(fs::directory_iterator(tmp.path()), fs::directory_iterator()), 1) << "left a file behind";
}

TEST_F(BadArguments, OutputFolderMissing) {
    const std::string out = tmp.file("no-such-folder/out.png");
    const ProcessResult r = run_kiln({"txt2img", "-m", kSd15, "-p", "a red circle", "-W", "64", "-H", "64", "--steps",
                                      "1", "-o", out, "--quiet"});
    expect_one_error_line(r, {out}, {"no such file"});
}

namespace {

// A PNG chunk: big-endian length, type, data, CRC-32 of type + data (PNG spec, section 5.3).
std::string png_chunk(const std::string& type, const std::string& data) {
    auto be32 = [](uint32_t v) {
        return std::string{char(v >> 24), char((v >> 16) & 0xff), char((v >> 8) & 0xff), char(v & 0xff)};
    };
    const std::string body = type + data;
    const uint32_t crc = static_cast<uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size())));
    return be32(static_cast<uint32_t>(data.size())) + body + be32(crc);
}

}  // namespace

TEST_F(BadArguments, InitImageClaimingAbsurdSize) {
    // A well-formed header for a 100000x100000 RGB image, followed by almost no data.
    std::string ihdr;
    for (uint32_t v : {100000u, 100000u})
        ihdr += std::string{char(v >> 24), char((v >> 16) & 0xff), char((v >> 8) & 0xff), char(v & 0xff)};
    ihdr += std::string{8, 2, 0, 0, 0};  // 8 bits, RGB, deflate, no filter, not interlaced
    const std::string png = std::string("\x89PNG\r\n\x1a\n", 8) + png_chunk("IHDR", ihdr) +
                            png_chunk("IDAT", std::string("\x78\x9c\x03\x00\x00\x00\x00\x01", 8)) +
                            png_chunk("IEND", "");
    const std::string path = tmp.file("huge.png");
    write_bytes(path, png);
    expect_one_error_line(img2img(path), {path, "100000x100000"});
}

TEST_F(BadArguments, InfoOnPngWithoutParameters) {
    const std::string path = good_init_png();
    expect_one_error_line(run_kiln({"info", path}), {path});
}

TEST_F(BadArguments, InfoOnTruncatedPng) {
    const std::string bytes = read_bytes(good_init_png());
    const std::string path = tmp.file("cut.png");
    write_bytes(path, bytes.substr(0, 40));
    expect_one_error_line(run_kiln({"info", path}), {path});
}

TEST_F(BadArguments, StrengthTooSmallForTheSteps) {
    // diffusers runs int(steps x strength) steps: int(4 x 0.2) = 0 leaves Euler nothing to do (PNDM, the
    // file's own sampler, still has one timestep left, as in diffusers).
    expect_one_error_line(img2img(good_init_png(), {"--strength", "0.2", "--sampler", "euler"}), {"0.2", "4 steps"});
}

TEST_F(BadArguments, InitImageNotAMultipleOf8) {
    kiln::Image img;
    img.width = img.height = 100;
    img.pixels.assign(100 * 100 * 3, 128);
    const std::string path = tmp.file("odd.png");
    kiln::write_png(path, img, {});
    expect_one_error_line(img2img(path), {"100"}, {"multiple of 8"});
}

// A prompt in Latin-1 (e.g. from a terminal that is not UTF-8) cannot go into the PNG's UTF-8
// text: the command refuses it before any work, naming the prompt.
TEST_F(BadArguments, PromptNotUtf8) {
    const std::string out = tmp.file("out.png");
    expect_one_error_line(run_kiln({"txt2img", "-m", kSd15, "-p", "caf\xe9", "-W", "64", "-H", "64", "--steps", "1",
                                    "-o", out, "--quiet"}),
                          {"prompt"}, {"utf-8"});
}

TEST_F(BadArguments, InitImageIsAFifo) {
    // Opening a FIFO for reading waits for a writer; kiln must refuse it instead of hanging.
    const std::string path = tmp.file("pipe.png");
    ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
    const ProcessResult r = run_kiln({"img2img", "-m", kSd15, "-p", "a red circle", "-i", path, "--steps", "4", "-o",
                                      tmp.file("out.png"), "--quiet"},
                                     std::chrono::seconds(60));
    expect_one_error_line(r, {path});
}

TEST_F(BadArguments, InitImageIsACheckpoint) {
    // A model given as -i by mistake: "not a PNG" from its first bytes.
    expect_one_error_line(img2img(kSd15), {kSd15}, {"not a png"});
}

TEST_F(BadArguments, UnknownDevice) {
    expect_one_error_line(txt2img({"--device", "gpu7"}), {"gpu7"}, {"unknown device"});
}

TEST_F(BadArguments, MissingGpuIsOneLineNamingIt) {
    // cuda:7 exists on no machine this runs on (CI has no GPU; the GPU machine has one).
    expect_one_error_line(txt2img({"--device", "cuda:7"}), {"cuda:7"}, {"not available"});
}

TEST_F(BadArguments, ReducedPrecisionOnTheCpu) {
    expect_one_error_line(txt2img({"--device", "cpu", "--precision", "fp16"}), {"--precision fp16"}, {"fp32 only"});
}

TEST(InfoDevices, ListsTheCpuAndSaysWhyThereIsNoGpu) {
    const ProcessResult r = run_kiln({"info", "--devices"});
    expect_success(r);
    EXPECT_EQ(r.out.rfind("cpu", 0), 0u) << r.out;  // the CPU first, always
    // For each GPU backend, either its first device or the reason it lists none.
    for (const std::string kind : {"cuda", "vulkan"})
        EXPECT_TRUE(r.out.find("\n" + kind + ":0 ") != std::string::npos ||
                    r.out.find("not listed: " + kind + ": ") != std::string::npos)
            << kind << "\n" << r.out;
}
