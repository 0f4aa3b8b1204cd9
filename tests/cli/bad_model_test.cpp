// `kiln` given broken or wrong model files and folders: one clear error line naming the file (and
// the tensor, where one is at fault), a non-zero exit, no crash, no output image, and the user's
// file left exactly as it was. The broken files are made from a copy of the sd15-mini single file.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/cli_expectations.h"
#include "cli/run_process.h"
#include "cli/test_files.h"

using namespace kiln::test;
namespace fs = std::filesystem;

namespace {

const std::string kSd15 = std::string(KILN_TEST_DATA) + "/sd15-mini/sd15-mini.safetensors";
const std::string kSd15Folder = std::string(KILN_TEST_DATA) + "/sd15-mini/diffusers";
const std::string kSd2 = std::string(KILN_TEST_DATA) + "/sd2-mini/sd2-mini.safetensors";

// Two UNet tensors of the fixture with the same byte size (F16 [4,16,3,3] and [16,4,3,3]).
const std::string kOutConv = "model.diffusion_model.out.2.weight";
const std::string kInConv = "model.diffusion_model.input_blocks.0.0.weight";

class BadModel : public testing::Test {
protected:
    TempDir tmp;

    // A cheap txt2img call on `model`; checks that kiln wrote no image and left `model` as it was.
    ProcessResult txt2img(const std::string& model, const std::vector<std::string>& extra = {}) {
        const bool is_file = fs::is_regular_file(model);
        FileSnapshot before;
        if (is_file) before = FileSnapshot::of(model);
        const std::string out = tmp.file("out.png");
        std::vector<std::string> args = {"txt2img", "-m", model, "-p", "a red circle", "-W", "64", "-H", "64",
                                         "--steps", "1", "-o", out, "--quiet"};
        args.insert(args.end(), extra.begin(), extra.end());
        ProcessResult r = run_kiln(args);
        EXPECT_FALSE(fs::exists(out)) << "a failed run wrote " << out;
        if (is_file) {
            EXPECT_TRUE(FileSnapshot::of(model) == before) << "kiln modified the user's file " << model;
        }
        return r;
    }

    // The fixture's header and data, to be broken and written under the temp folder.
    RawSafetensors fixture() { return RawSafetensors::read(kSd15); }

    std::string write(const RawSafetensors& raw, const std::string& name = "model.safetensors") {
        const std::string path = tmp.file(name);
        raw.write(path);
        return path;
    }
};

}  // namespace

TEST_F(BadModel, TruncatedInTheData) {
    std::string bytes = read_bytes(kSd15);
    bytes.resize(bytes.size() / 2);
    const std::string path = tmp.file("truncated.safetensors");
    write_bytes(path, bytes);
    expect_one_error_line(txt2img(path), {path}, {"truncated"});
}

TEST_F(BadModel, TruncatedInTheHeader) {
    std::string bytes = read_bytes(kSd15);
    bytes.resize(1000);  // the header alone is far longer (997 tensors)
    const std::string path = tmp.file("truncated.safetensors");
    write_bytes(path, bytes);
    expect_one_error_line(txt2img(path), {path}, {"header"});
}

TEST_F(BadModel, TruncatedToFewerBytesThanTheHeaderLength) {
    const std::string path = tmp.file("tiny.safetensors");
    write_bytes(path, read_bytes(kSd15).substr(0, 5));
    expect_one_error_line(txt2img(path), {path});
}

TEST_F(BadModel, EmptyFile) {
    const std::string path = tmp.file("empty.safetensors");
    write_bytes(path, "");
    expect_one_error_line(txt2img(path), {path});
}

TEST_F(BadModel, OverlappingOffsets) {
    RawSafetensors raw = fixture();
    ASSERT_EQ(raw.nbytes(kOutConv), raw.nbytes(kInConv));
    raw.header[kOutConv]["data_offsets"] = raw.header[kInConv]["data_offsets"];
    const std::string path = write(raw);
    expect_one_error_line(txt2img(path), {path, kOutConv, kInConv}, {"overlap"});
}

TEST_F(BadModel, OffsetsPastTheEnd) {
    RawSafetensors raw = fixture();
    const uint64_t size = raw.data.size(), n = raw.nbytes(kOutConv);
    raw.header[kOutConv]["data_offsets"] = {size, size + n};
    const std::string path = write(raw);
    expect_one_error_line(txt2img(path), {path, kOutConv, std::to_string(size + n)});
}

TEST_F(BadModel, OffsetsBeginAfterEnd) {
    RawSafetensors raw = fixture();
    auto& offsets = raw.header[kOutConv]["data_offsets"];
    offsets = {offsets[1], offsets[0]};
    const std::string path = write(raw);
    expect_one_error_line(txt2img(path), {path, kOutConv});
}

TEST_F(BadModel, UnknownDtype) {
    RawSafetensors raw = fixture();
    raw.header[kOutConv]["dtype"] = "F12";
    const std::string path = write(raw);
    expect_one_error_line(txt2img(path), {path, kOutConv, "F12"}, {"dtype"});
}

TEST_F(BadModel, HeaderNotJson) {
    std::string bytes = read_bytes(kSd15);
    bytes[8] = '[';  // the header's opening '{'
    bytes[9] = ';';
    const std::string path = tmp.file("garbled.safetensors");
    write_bytes(path, bytes);
    expect_one_error_line(txt2img(path), {path}, {"json"});
}

TEST_F(BadModel, MissingTensor) {
    RawSafetensors raw = fixture();
    raw.header.erase(kOutConv);  // its bytes stay in the data area, unreferenced
    const std::string path = write(raw);
    expect_one_error_line(txt2img(path), {path, "UNet"}, {"missing"});
}

TEST_F(BadModel, MissingTextEncoderTensor) {
    RawSafetensors raw = fixture();
    const std::string prefix = "cond_stage_model.transformer.", rest = "text_model.encoder.layers.0.mlp.fc1.weight";
    ASSERT_TRUE(raw.header.contains(prefix + rest));
    raw.header.erase(prefix + rest);
    const std::string path = write(raw);
    expect_one_error_line(txt2img(path), {path, prefix, rest});
}

TEST_F(BadModel, MissingVaeTensor) {
    RawSafetensors raw = fixture();
    const std::string name = "first_stage_model.decoder.conv_out.weight";
    ASSERT_TRUE(raw.header.contains(name));
    raw.header.erase(name);
    const std::string path = write(raw);
    expect_one_error_line(txt2img(path), {path, name});
}

TEST_F(BadModel, WrongShape) {
    // Same element count, so the header is consistent and only the model can tell it is wrong.
    RawSafetensors raw = fixture();
    ASSERT_EQ(raw.header[kOutConv]["shape"], nlohmann::ordered_json({4, 16, 3, 3}));
    raw.header[kOutConv]["shape"] = {16, 4, 3, 3};
    const std::string path = write(raw);
    expect_one_error_line(txt2img(path), {path, "UNet", "[16, 4, 3, 3]"}, {"shape"});
}

// The user's single file names UNet tensors in the original layout; messages must use that name
// (model.diffusion_model.out.2.weight), not only diffusers' (conv_out.weight).
TEST_F(BadModel, MissingUnetTensorIsNamedAsInTheFile) {
    RawSafetensors raw = fixture();
    raw.header.erase(kOutConv);
    const std::string path = write(raw);
    expect_one_error_line(txt2img(path), {path, kOutConv});
}

TEST_F(BadModel, WrongShapeTensorIsNamedAsInTheFile) {
    RawSafetensors raw = fixture();
    raw.header[kOutConv]["shape"] = {16, 4, 3, 3};
    const std::string path = write(raw);
    expect_one_error_line(txt2img(path), {path, kOutConv});
}

TEST_F(BadModel, UnexpectedTensor) {
    RawSafetensors raw = fixture();
    const std::string name = "model.diffusion_model.extra_block.weight";
    raw.header[name] = raw.header[kOutConv];  // the bytes of the same tensor again: no overlap check trips
    raw.header[name]["data_offsets"] = {raw.data.size(), raw.data.size() + raw.nbytes(kOutConv)};
    raw.data += raw.data.substr(raw.header[kOutConv]["data_offsets"][0].get<size_t>(), raw.nbytes(kOutConv));
    const std::string path = write(raw);
    expect_one_error_line(txt2img(path), {path, name});
}

TEST_F(BadModel, NotAStableDiffusionCheckpoint) {
    RawSafetensors raw;
    raw.header["weight"] = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}};
    raw.data = std::string(8, '\0');
    const std::string path = write(raw, "classifier.safetensors");
    expect_one_error_line(txt2img(path), {path});
}

TEST_F(BadModel, MissingFile) {
    const std::string path = tmp.file("no-such-model.safetensors");
    expect_one_error_line(txt2img(path), {path});
}

TEST_F(BadModel, DirectoryThatIsNotAModel) {
    fs::create_directory(tmp.path() / "photos");
    write_bytes(tmp.path() / "photos" / "cat.png", "not really a png");
    const std::string dir = (tmp.path() / "photos").string();
    expect_one_error_line(txt2img(dir), {dir}, {"model_index.json"});
}

TEST_F(BadModel, DiffusersFolderWithCorruptConfig) {
    const fs::path dir = tmp.path() / "sd15-diffusers";
    fs::copy(kSd15Folder, dir, fs::copy_options::recursive);
    const fs::path config = dir / "unet" / "config.json";
    write_bytes(config, "{\"_class_name\": \"UNet2DConditionModel\", \"in_channels\": 4,");  // cut short
    const FileSnapshot before = FileSnapshot::of(config);
    expect_one_error_line(txt2img(dir.string()), {config.string()}, {"json"});
    EXPECT_TRUE(FileSnapshot::of(config) == before);
}

TEST_F(BadModel, DiffusersFolderWithCorruptSchedulerConfig) {
    const fs::path dir = tmp.path() / "sd15-diffusers";
    fs::copy(kSd15Folder, dir, fs::copy_options::recursive);
    const fs::path config = dir / "scheduler" / "scheduler_config.json";
    write_bytes(config, "not json at all");
    expect_one_error_line(txt2img(dir.string()), {config.string()});
}

TEST_F(BadModel, DiffusersFolderWithoutUnetWeights) {
    const fs::path dir = tmp.path() / "sd15-diffusers";
    fs::copy(kSd15Folder, dir, fs::copy_options::recursive);
    fs::remove(dir / "unet" / "diffusion_pytorch_model.safetensors");
    expect_one_error_line(txt2img(dir.string()), {"diffusion_pytorch_model.safetensors"});
}

TEST_F(BadModel, Sd2SingleFileWithoutPrediction) {
    expect_one_error_line(txt2img(kSd2), {"--prediction"});
}

TEST_F(BadModel, Sd2SingleFileWithPredictionRuns) {
    // The counterpart of the test above: with --prediction the same file generates.
    const std::string out = tmp.file("sd2.png");
    const FileSnapshot before = FileSnapshot::of(kSd2);
    expect_success(run_kiln({"txt2img", "-m", kSd2, "-p", "a red circle", "-W", "64", "-H", "64", "--steps", "1",
                             "--prediction", "v", "-o", out, "--quiet"}));
    EXPECT_TRUE(fs::exists(out));
    EXPECT_TRUE(FileSnapshot::of(kSd2) == before);
}

TEST_F(BadModel, InfoOnGarbage) {
    const std::string path = tmp.file("garbage.bin");
    std::string bytes;
    for (int i = 0; i < 4096; ++i) bytes += static_cast<char>((i * 7919 + 13) & 0xff);
    write_bytes(path, bytes);
    const FileSnapshot before = FileSnapshot::of(path);
    expect_one_error_line(run_kiln({"info", path}), {path});
    EXPECT_TRUE(FileSnapshot::of(path) == before);
}

TEST_F(BadModel, InfoOnTruncatedModel) {
    std::string bytes = read_bytes(kSd15);
    bytes.resize(bytes.size() - 100);
    const std::string path = tmp.file("truncated.safetensors");
    write_bytes(path, bytes);
    expect_one_error_line(run_kiln({"info", path}), {path});
}

TEST_F(BadModel, InfoOnMissingFile) {
    const std::string path = tmp.file("nothing-here.safetensors");
    expect_one_error_line(run_kiln({"info", path}), {path});
}

TEST_F(BadModel, InfoOnDirectoryThatIsNotAModel) {
    expect_one_error_line(run_kiln({"info", tmp.path().string()}), {tmp.path().string()});
}

// A FIFO as the model: a plain open() waits for a writer, so kiln would hang.
TEST_F(BadModel, ModelIsAFifo) {
    const std::string path = tmp.file("pipe.safetensors");
    ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
    expect_one_error_line(run_kiln({"txt2img", "-m", path, "-p", "a red circle", "-W", "64", "-H", "64", "--steps",
                                    "1", "-o", tmp.file("out.png"), "--quiet"},
                                   std::chrono::seconds(30)),
                          {path});
}

// `kiln info` must not block opening a FIFO to sniff its signature.
TEST_F(BadModel, InfoOnAFifo) {
    const std::string path = tmp.file("pipe.safetensors");
    ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
    expect_one_error_line(run_kiln({"info", path}, std::chrono::seconds(30)), {path});
}
