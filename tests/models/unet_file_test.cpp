// --unet FILE (LoadOptions::unet_path): the UNet from another file than the model's text encoders and VAE. Such files
// come from ComfyUI-GGUF: a UNet alone, its keys in the original layout without "model.diffusion_model.", quantized
// to GGUF. Made here from the sd15-mini fixture (the UNet's tensors, renamed, quantized as stable-diffusion.cpp's
// and ComfyUI-GGUF's converters do: q8_0 where the innermost dimension is whole blocks, not biases nor the time
// embedding), the loaded UNet must compute exactly what the same blocks compute inside a whole checkpoint; a UNet
// alone in float32 exactly what the checkpoint's own UNet computes, beside a single file or a diffusers folder. A UNet in
// diffusers' layout (a diffusers folder's unet/ weights, its folder, or a GGUF with its names) computes what that
// folder's UNet computes.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>

#include "common/fixtures.h"
#include "core/dtype_convert.h"
#include "io/gguf_test_util.h"
#include "io/io_test_util.h"
#include "io/safetensors.h"
#include "kiln/error.h"
#include "models/fixture_unet_call.h"
#include "models/model.h"
#include "ops/cpu_q8_products.h"

using namespace kiln;
using kiln::test::data_path;
using kiln::test::expect_identical;

namespace {

const std::string kPrefix = "model.diffusion_model.";

bool is_unet(const std::string& name) { return name.rfind(kPrefix, 0) == 0; }

// Writes the tensors of `src` that `keep` keeps as GGUF under `rename`'s names; the UNet's q8_0 where the converters
// quantize, everything else as stored.
void write_gguf_of(const SafetensorsFile& src, const std::function<bool(const std::string&)>& keep,
                   const std::function<std::string(const std::string&)>& rename, const std::string& path) {
    std::vector<kiln::test::GgufTensorSpec> specs;
    std::string data;
    for (const std::string& name : src.names()) {
        if (!keep(name)) continue;
        const TensorInfo& ti = src.info(name);
        const std::vector<uint64_t> ne(ti.shape.rbegin(), ti.shape.rend());
        data += std::string((32 - data.size() % 32) % 32, '\0');
        const uint64_t offset = data.size();
        const int64_t inner = ti.shape.empty() ? 1 : ti.shape.back();
        const bool quantize = is_unet(name) && inner % 32 == 0 && name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") != 0 &&
                              name.find("time_embed.") == std::string::npos;
        // The fixture's stored types as ggml codes (F16 1, F32 0, I64 27: position ids)
        const uint32_t stored = ti.dtype == DType::F16 ? 1 : ti.dtype == DType::I64 ? 27 : 0;
        ASSERT_TRUE(ti.dtype == DType::F16 || ti.dtype == DType::F32 || ti.dtype == DType::I64) << name;
        if (quantize) {
            const Tensor f = src.load(name);
            std::vector<uint8_t> blocks(size_t(dtype_storage_bytes(DType::Q8_0, f.numel())));
            quantize_values(DType::Q8_0, f.data(), blocks.data(), size_t(f.numel()));
            data.append(reinterpret_cast<const char*>(blocks.data()), blocks.size());
            specs.push_back({rename(name), ne, 8, offset});
        } else {
            data.append(reinterpret_cast<const char*>(src.raw(name)), ti.nbytes);
            specs.push_back({rename(name), ne, stored, offset});
        }
    }
    kiln::test::write_bytes(path, kiln::test::gguf_bytes({kiln::test::kv_u32("general.alignment", 32)}, specs, data));
}

// The UNet's tensors of `src` alone, unprefixed, as safetensors (their values in float32); `extra` adds one more.
void write_unet_alone(const SafetensorsFile& src, const std::string& path, const std::string& extra = "") {
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const std::string& name : src.names())
        if (is_unet(name)) tensors.emplace_back(name.substr(kPrefix.size()), src.load(name));
    if (!extra.empty()) tensors.emplace_back(extra, Tensor({2}));
    write_safetensors(path, tensors, DType::F32);
}

StableDiffusionModel load_with_unet(const std::string& model, const std::string& unet) {
    LoadOptions o;
    o.unet_path = unet;
    o.prediction = "epsilon";  // SD 2.x single files need it; it changes nothing in a UNet call
    return load_model(model, o);
}

std::string diffusers_unet(const std::string& model) {
    return data_path(model + "/diffusers/unet/diffusion_pytorch_model.safetensors");
}

// The tensors of a diffusers UNet file, in float32, and `extra` when not empty.
void write_diffusers_unet(const std::string& model, const std::string& path, const std::string& extra = "") {
    const SafetensorsFile src = SafetensorsFile::open(diffusers_unet(model));
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const std::string& name : src.names()) tensors.emplace_back(name, src.load(name));
    if (!extra.empty()) tensors.emplace_back(extra, Tensor({2}));
    write_safetensors(path, tensors, DType::F32);
}

void expect_load_error(const std::string& model, const std::string& unet, ErrorKind kind, const std::string& words) {
    const Error e = kiln::test::expect_error([&] { load_with_unet(model, unet); });
    EXPECT_EQ(e.kind(), kind) << unet << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
}

}  // namespace

TEST(UNetFile, QuantizedUNetAloneComputesAsInsideACheckpoint) {
    const ops::ScopedCpuQ8Products exact(ops::CpuQ8Products::Dequantize);  // the loader is tested, not int8 products
    kiln::test::TempDir dir;
    const std::string base = data_path("sd15-mini/sd15-mini.safetensors");
    const SafetensorsFile src = SafetensorsFile::open(base);
    const std::string alone = dir.file("unet-q8_0.gguf"), whole = dir.file("sd15-mini-q8_0.gguf");
    write_gguf_of(src, is_unet, [](const std::string& n) { return n.substr(kPrefix.size()); }, alone);
    // The whole checkpoint with the same UNet blocks, its other tensors as stored.
    write_gguf_of(src, [](const std::string&) { return true; }, [](const std::string& n) { return n; }, whole);
    const StableDiffusionModel a = load_with_unet(base, alone), b = load_model(whole);
    const kiln::test::FixtureUNetCall call;
    expect_identical(a.unet->forward(call.inputs()), b.unet->forward(call.inputs()), "UNet from a UNet alone (q8_0)");
    EXPECT_GT(a.unet->pages().bytes(), 0);  // its blocks are views of the mapped file, as a whole GGUF's
    // The text encoders and VAE stay the model's (base's and the whole GGUF's unquantized ones are the same).
    expect_identical(a.vae->decode(Tensor::filled({1, 4, 8, 8}, 0.3f)), b.vae->decode(Tensor::filled({1, 4, 8, 8}, 0.3f)),
                     "VAE");
}

TEST(UNetFile, FloatUNetAloneBesideASingleFileOrAFolderIsTheModelsOwn) {
    kiln::test::TempDir dir;
    const std::string base = data_path("sd15-mini/sd15-mini.safetensors"), folder = data_path("sd15-mini/diffusers");
    const SafetensorsFile src = SafetensorsFile::open(base);
    const std::string alone = dir.file("unet.safetensors");
    write_unet_alone(src, alone);
    const StableDiffusionModel own = load_model(base);
    const kiln::test::FixtureUNetCall call;
    const Tensor want = own.unet->forward(call.inputs());
    expect_identical(load_with_unet(base, alone).unet->forward(call.inputs()), want, "beside the single file");
    expect_identical(load_with_unet(folder, alone).unet->forward(call.inputs()), want, "beside the diffusers folder");
    // A whole checkpoint as --unet: its UNet.
    expect_identical(load_with_unet(folder, base).unet->forward(call.inputs()), want, "a checkpoint's UNet");
}

TEST(UNetFile, WrongFilesAreNamedErrors) {
    kiln::test::TempDir dir;
    const std::string base = data_path("sd15-mini/sd15-mini.safetensors");
    const SafetensorsFile src = SafetensorsFile::open(base);
    const std::string alone = dir.file("unet.safetensors"), extra = dir.file("unet-extra.safetensors");
    write_unet_alone(src, alone);
    write_unet_alone(src, extra, "first_stage_model.decoder.conv_in.weight");
    // Another architecture's UNet (SD 2.x's context is wider than SD 1.x's text encoder).
    expect_load_error(base, data_path("sd2-mini/sd2-mini.safetensors"), ErrorKind::InvalidModel, "another architecture");
    expect_load_error(base, extra, ErrorKind::InvalidModel, "unexpected tensors");
    expect_load_error(base, data_path("sd15-mini/diffusers/vae/diffusion_pytorch_model.safetensors"),
                      ErrorKind::InvalidModel, "holds no UNet");
    expect_load_error(base, dir.file("missing.gguf"), ErrorKind::IO, "no such file");
    expect_load_error(base, dir.path(), ErrorKind::InvalidArgument, "is a folder");
    // A UNet alone given as the model says to pass it as --unet.
    const Error e = kiln::test::expect_error([&] { load_model(alone); });
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("--unet"), std::string::npos) << e.what();
}

TEST(UNetFile, DiffusersUNetIsTheFoldersOwn) {
    for (const std::string model : {"sd15-mini", "sd2-mini", "sdxl-mini"}) {
        const std::string folder = data_path(model + "/diffusers"), single = data_path(model + "/" + model + ".safetensors");
        const kiln::test::FixtureUNetCall call(model);
        const Tensor want = load_model(folder).unet->forward(call.inputs());
        // The file alone (its config read from the tensors), its unet/ folder (config.json), the model folder (its unet/).
        for (const std::string& unet : {diffusers_unet(model), folder + "/unet", folder})
            expect_identical(load_with_unet(folder, unet).unet->forward(call.inputs()), want,
                             model + ": " + unet + " beside the folder");
        expect_identical(load_with_unet(single, diffusers_unet(model)).unet->forward(call.inputs()), want,
                         model + ": the UNet file beside the single file");
        // A unet/ folder without config.json: the config from the tensors.
        kiln::test::TempDir dir;
        std::filesystem::copy_file(diffusers_unet(model), dir.file("diffusion_pytorch_model.safetensors"));
        expect_identical(load_with_unet(folder, dir.path().string()).unet->forward(call.inputs()), want,
                         model + ": a unet/ folder without config.json");
    }
}

TEST(UNetFile, QuantizedDiffusersUNetComputesAsTheOriginalLayouts) {
    const ops::ScopedCpuQ8Products exact(ops::CpuQ8Products::Dequantize);
    kiln::test::TempDir dir;
    const std::string base = data_path("sd15-mini/sd15-mini.safetensors");
    const SafetensorsFile src = SafetensorsFile::open(base);
    // The same q8_0 blocks under diffusers' names (the rename table inverted) and under the original ones.
    std::map<std::string, std::string> to_diffusers;
    for (const auto& [name, mapping] : unet_table_from_ldm(src, kPrefix, nullptr)) to_diffusers[mapping.file_name] = name;
    const std::string diffusers = dir.file("unet-diffusers-q8_0.gguf"), original = dir.file("unet-q8_0.gguf");
    write_gguf_of(src, is_unet, [&](const std::string& n) { return to_diffusers.at(n); }, diffusers);
    write_gguf_of(src, is_unet, [](const std::string& n) { return n.substr(kPrefix.size()); }, original);
    const StableDiffusionModel a = load_with_unet(base, diffusers), b = load_with_unet(base, original);
    const kiln::test::FixtureUNetCall call;
    expect_identical(a.unet->forward(call.inputs()), b.unet->forward(call.inputs()), "UNet in diffusers' layout (q8_0)");
    EXPECT_GT(a.unet->pages().bytes(), 0);  // views of the mapped file
}

TEST(UNetFile, WrongDiffusersUNetsAreNamedErrors) {
    kiln::test::TempDir dir;
    const std::string base = data_path("sd15-mini/sd15-mini.safetensors");
    const std::string xl = data_path("sdxl-mini/sdxl-mini.safetensors");
    // Truncated: the header names more bytes than the file has.
    const std::string truncated = dir.file("truncated.safetensors");
    std::filesystem::copy_file(diffusers_unet("sd15-mini"), truncated);
    std::filesystem::resize_file(truncated, std::filesystem::file_size(truncated) / 2);
    expect_load_error(base, truncated, ErrorKind::InvalidModel, "truncated");
    const std::string extra = dir.file("extra.safetensors");
    write_diffusers_unet("sd15-mini", extra, "down_blocks.0.extra.weight");
    expect_load_error(base, extra, ErrorKind::InvalidModel, "unexpected tensors in " + extra + ": down_blocks.0.extra.weight");
    // Another architecture's UNet: SD 2.x's cross-attention is wider; SDXL's has its extra conditioning.
    expect_load_error(base, diffusers_unet("sd2-mini"), ErrorKind::InvalidModel, "another architecture");
    expect_load_error(base, diffusers_unet("sdxl-mini"), ErrorKind::InvalidModel, "an SDXL UNet beside");
    expect_load_error(xl, diffusers_unet("sd15-mini"), ErrorKind::InvalidModel, "not an SDXL UNet beside");
    // A folder without a UNet's weights, and one whose weights are no diffusers UNet.
    expect_load_error(base, data_path("sd15-mini/diffusers/vae"), ErrorKind::InvalidModel, "holds no UNet");
    expect_load_error(base, data_path("sd15-mini/diffusers/scheduler"), ErrorKind::InvalidArgument, "is a folder without");
    // A diffusers UNet given as the model says to pass it as --unet.
    const Error e = kiln::test::expect_error([&] { load_model(diffusers_unet("sd15-mini")); });
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("diffusers' layout"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--unet"), std::string::npos) << e.what();
}
