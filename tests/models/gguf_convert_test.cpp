// kiln convert on the fixture and demo models: every tensor keeps name and shape and holds its stored bytes or
// the very blocks `--weights W` makes at load (read through the loader's WeightReader); `--weights` quantizes
// only what GGUF cannot hold in blocks beyond that (3x3, 1x1 convolutions); the file loaded with `--weights W`
// computes exactly what the original does with it (bound 0: same values, same ops); the input is never written.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/fixtures.h"
#include "io/io_test_util.h"
#include "kiln/error.h"
#include "models/fixture_unet_call.h"
#include "models/gguf_convert.h"
#include "models/model.h"
#include "models/unet/unet_config.h"

using namespace kiln;
using kiln::test::data_path;

namespace {

using kiln::test::expect_identical;

std::vector<uint8_t> bytes_of(const SafetensorsFile& f, const std::string& name) {
    return std::vector<uint8_t>(f.raw(name), f.raw(name) + f.info(name).nbytes);
}
std::vector<uint8_t> bytes_of(const Tensor& t) {
    return std::vector<uint8_t>(t.blocks(), t.blocks() + dtype_storage_bytes(t.dtype(), t.numel()));
}

// Converts and compares tensor by tensor; returns how many tensors changed dtype.
int64_t convert_and_check(const std::string& input, DType w, const std::string& out) {
    write_gguf_conversion(plan_gguf_conversion(input, w), out);
    const SafetensorsFile src = SafetensorsFile::open(input), dst = SafetensorsFile::open(out);
    EXPECT_EQ(dst.names(), src.names());
    int64_t changed = 0;
    for (const std::string& name : src.names()) {
        const TensorInfo &a = src.info(name), &b = dst.info(name);
        EXPECT_EQ(a.shape, b.shape) << name;
        changed += a.dtype != b.dtype;
        if (a.dtype == b.dtype) EXPECT_EQ(bytes_of(dst, name), bytes_of(src, name)) << name;
    }
    return changed;
}

// The UNet's matrices as `--weights w` makes them at load, against the converted file's tensors.
void expect_unet_as_quantized_at_load(const std::string& input, const std::string& converted, DType w) {
    auto src = std::make_shared<const SafetensorsFile>(SafetensorsFile::open(input));
    const SafetensorsFile dst = SafetensorsFile::open(converted);
    std::vector<std::string> unknown;
    const auto table = unet_table_from_ldm(*src, "model.diffusion_model.", &unknown);
    MappedSource source(src, table, "UNet");
    source.weights_dtype = w;
    WeightReader reader(source);
    int same = 0, kept = 0;
    for (const auto& [internal, m] : table) {
        if (m.op != WeightMapping::Op::Copy) continue;
        const Tensor at_load = reader.get_matrix(internal);
        const TensorInfo& in_file = dst.info(m.file_name);
        if (!is_block_quantized(at_load.dtype())) {
            EXPECT_FALSE(is_block_quantized(in_file.dtype)) << m.file_name << " quantized, but not at load";
        } else if (is_block_quantized(in_file.dtype)) {
            EXPECT_EQ(bytes_of(dst, m.file_name), bytes_of(at_load)) << m.file_name;
            ++same;
        } else {  // GGUF cannot hold it in blocks
            EXPECT_NE(in_file.shape.back() % dtype_block_values(at_load.dtype()), 0) << m.file_name;
            ++kept;
        }
    }
    EXPECT_GT(same, 10) << dtype_name(w);
    EXPECT_GT(kept, 0) << dtype_name(w);  // 3x3 convolutions of whole-block rows
}

}  // namespace

class GgufConvert : public ::testing::TestWithParam<DType> {};

TEST_P(GgufConvert, Sd15MiniLoadsAsTheOriginalWithTheSameWeightsOption) {
    const DType w = GetParam();
    kiln::test::TempDir dir;
    const std::string input = data_path("sd15-mini/sd15-mini.safetensors"), out = dir.file("sd15-mini.gguf");
    EXPECT_GT(convert_and_check(input, w, out), 20);
    if (is_block_quantized(w)) expect_unet_as_quantized_at_load(input, out, w);
    LoadOptions options;
    options.weights = w;
    const StableDiffusionModel a = load_model(out, options), b = load_model(input, options);
    const kiln::test::FixtureUNetCall call;
    const UNetInputs in = call.inputs();
    expect_identical(a.unet->forward(in), b.unet->forward(in), "UNet");
    Tensor latents({1, 4, 8, 8});
    for (int64_t i = 0; i < latents.numel(); ++i) latents[i] = float((i * 37) % 19) / 9.0f - 1.0f;
    expect_identical(a.vae->decode(latents), b.vae->decode(latents), "VAE decode");
}

INSTANTIATE_TEST_SUITE_P(Formats, GgufConvert,
                         ::testing::Values(DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K,
                                           DType::Q5_K, DType::Q6_K, DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(GgufConvertModels, Sd2SdxlAndDemoModelConvertAndLoad) {
    kiln::test::TempDir dir;
    for (const char* name : {"sd2-mini", "sdxl-mini"}) {
        const std::string out = dir.file(std::string(name) + ".gguf");
        EXPECT_GT(convert_and_check(data_path(std::string(name) + "/" + name + ".safetensors"), DType::Q4_0, out), 20);
        LoadOptions options;
        options.prediction = "epsilon";
        EXPECT_EQ(load_model(out, options).arch, std::string(name) == "sd2-mini" ? Architecture::SD2 : Architecture::SDXL);
    }
    const std::string demo = dir.file("demo.gguf");
    EXPECT_GT(convert_and_check(KILN_DEMO_MODEL, DType::Q8_0, demo), 100);
    expect_unet_as_quantized_at_load(KILN_DEMO_MODEL, demo, DType::Q8_0);
}

TEST(GgufConvertModels, NeverWritesTheInputAndNamesDamage) {
    kiln::test::TempDir dir;
    const std::string input = dir.file("in.safetensors");
    std::filesystem::copy_file(data_path("sd15-mini/sd15-mini.safetensors"), input);
    std::filesystem::create_hard_link(input, dir.file("link.gguf"));
    const auto size = std::filesystem::file_size(input);
    const ConvertPlan plan = plan_gguf_conversion(input, DType::Q8_0);
    for (const std::string& out : {input, dir.file("link.gguf"), dir.file("./in.safetensors")})
        EXPECT_THROW(write_gguf_conversion(plan, out), Error) << out;
    EXPECT_EQ(std::filesystem::file_size(input), size);
    EXPECT_FALSE(SafetensorsFile::open(input).is_gguf());
    EXPECT_THROW(plan_gguf_conversion(data_path("sd15-mini/diffusers"), DType::Q8_0), Error);

    // A NaN in a matrix being quantized: InvalidModel naming the tensor, and no output file.
    std::string victim;
    for (const ConvertEntry& e : plan.entries)
        if (victim.empty() && is_block_quantized(e.out.dtype)) victim = e.source_name;
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const std::string& n : plan.file->names()) {
        tensors.emplace_back(n, plan.file->load(n));
        if (n == victim) tensors.back().second[5] = std::nanf("");
    }
    const std::string nan_file = dir.file("nan.safetensors"), out = dir.file("nan.gguf");
    write_safetensors(nan_file, tensors, DType::F32);
    try {
        write_gguf_conversion(plan_gguf_conversion(nan_file, DType::Q4_0), out);
        ADD_FAILURE() << "a NaN weight was quantized";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidModel) << e.what();
        EXPECT_NE(std::string(e.what()).find(victim), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(GgufConvertModels, ComfyUiUnetOnlyFileIsAClearError) {
    kiln::test::TempDir dir;
    const std::string path = dir.file("unet-only.gguf");
    const std::vector<uint8_t> zeros(32 * 4 * 9 * 2, 0);
    write_gguf(path, {{"input_blocks.0.0.weight", {32, 4, 3, 3}, DType::F16}, {"out.2.weight", {4, 32, 3, 3}, DType::F16}},
               [&](size_t, const GgufBytes& write) { write(zeros.data(), zeros.size()); });
    try {
        load_model(path);
        ADD_FAILURE() << "a UNet-only file loaded";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
        EXPECT_NE(std::string(e.what()).find("ComfyUI-GGUF"), std::string::npos) << e.what();
    }
}

// The writer's refusals (io/gguf_writer.h): what GGUF cannot hold, and producers that miscount; no file is left.
TEST(GgufConvertModels, WriterRefusesWhatGgufCannotHold) {
    kiln::test::TempDir dir;
    const std::string path = dir.file("bad.gguf");
    auto refused = [&](const std::vector<GgufWriteSpec>& specs, const std::string& part, int bytes = 0) {
        const std::vector<uint8_t> b(size_t(bytes), 0);
        try {
            write_gguf(path, specs, [&](size_t, const GgufBytes& write) { write(b.data(), b.size()); });
            ADD_FAILURE() << "accepted: " << part;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
        }
        EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << part;
    };
    refused({{"conv", {32, 32, 3, 3}, DType::Q8_0}}, "innermost dimension 3");  // ggml blocks run along it
    refused({{"k", {2, 128}, DType::Q4_K}}, "whole blocks of 256");
    refused({{"a", {32}, DType::F32}, {"a", {32}, DType::F32}}, "given twice");
    refused({{"b", {1, 1, 1, 1, 1}, DType::F32}}, "at most 4");
    refused({{"u", {4}, DType::U8}}, "U8");
    refused({{"short", {8}, DType::F32}}, "got 0 of its 32 bytes");
    refused({{"long", {1}, DType::F32}}, "more bytes", 8);
}
