// Single-file checkpoints converted to GGUF load through the same path as their safetensors originals. The
// GGUF files are made here from the sd15-mini fixture the way stable-diffusion.cpp's `convert` makes them
// (its ModelLoader::tensor_should_be_converted, read in its source: a tensor is quantized when its innermost
// dimension is whole blocks and it is not a bias, nor under time_embed./label_emb., nor an embedding; names
// unchanged). The model loaded from such a file must compute exactly what the same model computes from a
// float32 file holding the dequantized values: block weights are dequantized tile by tile into the very
// floats the float32 file holds, before the same products (bound 0).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "common/fixtures.h"
#include "models/fixture_unet_call.h"
#include "core/dtype_convert.h"
#include "io/gguf_test_util.h"
#include "io/io_test_util.h"
#include "io/safetensors.h"
#include "models/model.h"
#include "ops/cpu_q8_products.h"

using namespace kiln;
using kiln::test::data_path;

namespace {

using kiln::test::expect_identical;
using kiln::test::FixtureUNetCall;

bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool sdcpp_quantizes(const std::string& name, const Shape& shape) {
    const int64_t inner = shape.empty() ? 1 : shape.back();
    return inner % 32 == 0 && shape_numel(shape) > 0 && !ends_with(name, ".bias") &&
           name.find("time_embed.") == std::string::npos && name.find("label_emb.") == std::string::npos &&
           name.find("embedding") == std::string::npos;
}

uint32_t ggml_code(DType t) {
    switch (t) {
        case DType::F32: return 0;
        case DType::F16: return 1;
        case DType::Q4_0: return 2;
        case DType::Q4_1: return 3;
        case DType::Q5_0: return 6;
        case DType::Q5_1: return 7;
        case DType::Q8_0: return 8;
        case DType::BF16: return 30;
        case DType::I64: return 27;
        default: ADD_FAILURE() << "no ggml code for " << dtype_name(t); return 0;
    }
}

struct Converted {
    int quantized = 0;
    std::vector<std::pair<std::string, Tensor>> dequantized;  // every tensor, as float32 values
};

// Writes `src` as GGUF at `path` with `q` for the tensors sd.cpp would quantize.
Converted convert(const SafetensorsFile& src, DType q, const std::string& path) {
    Converted out;
    std::vector<kiln::test::GgufTensorSpec> specs;
    std::string data;
    for (const std::string& name : src.names()) {
        const TensorInfo& ti = src.info(name);
        std::vector<uint64_t> ne(ti.shape.rbegin(), ti.shape.rend());
        data += std::string((32 - data.size() % 32) % 32, '\0');
        const uint64_t offset = data.size();
        // One projection of each self-attention's stacked q|k|v left unquantized: stacks of mixed precision.
        const bool mixed_stack = name.find("attn1.to_k") != std::string::npos;
        if (sdcpp_quantizes(name, ti.shape) && !mixed_stack) {
            const Tensor f = src.load(name);
            std::vector<uint8_t> blocks(size_t(dtype_storage_bytes(q, f.numel())));
            quantize_values(q, f.data(), blocks.data(), size_t(f.numel()));
            data.append(reinterpret_cast<const char*>(blocks.data()), blocks.size());
            Tensor back(ti.shape);
            decode_to_float(q, blocks.data(), back.data(), size_t(back.numel()));
            out.dequantized.emplace_back(name, std::move(back));
            specs.push_back({name, ne, ggml_code(q), offset});
            ++out.quantized;
        } else {
            data.append(reinterpret_cast<const char*>(src.raw(name)), ti.nbytes);
            out.dequantized.emplace_back(name, src.load(name));
            specs.push_back({name, ne, ggml_code(ti.dtype), offset});
        }
    }
    kiln::test::write_bytes(path, kiln::test::gguf_bytes({kiln::test::kv_u32("general.alignment", 32)}, specs, data));
    return out;
}


}  // namespace

class GgufModel : public ::testing::TestWithParam<DType> {};

TEST_P(GgufModel, ComputesWhatItsDequantizedValuesCompute) {
    const DType q = GetParam();
    // The loader is tested: q8_0 products dequantized, as the float file's (not int8: ops/cpu_q8_products.h).
    const ops::ScopedCpuQ8Products exact(ops::CpuQ8Products::Dequantize);
    kiln::test::TempDir dir;
    const SafetensorsFile src = SafetensorsFile::open(data_path("sd15-mini/sd15-mini.safetensors"));
    const std::string gguf = dir.file("sd15-mini.gguf"), f32 = dir.file("sd15-mini-f32.safetensors");
    const Converted c = convert(src, q, gguf);
    EXPECT_GT(c.quantized, 50);  // the linear layers and norms: the test is not of an unquantized file
    write_safetensors(f32, c.dequantized, DType::F32);

    const StableDiffusionModel a = load_model(gguf), b = load_model(f32);
    EXPECT_EQ(a.arch, Architecture::SD1);
    const FixtureUNetCall call;
    const UNetInputs in = call.inputs();
    expect_identical(a.unet->forward(in), b.unet->forward(in), "UNet");
    // The blocks are views of the mapped file: their pages are recorded, and dropping them block by block (what
    // a --memory budget does) changes nothing.
    EXPECT_GT(a.unet->pages().bytes(), 0);
    const std::function<void(const std::string&)> drop = [&](const std::string& block) { a.unet->pages().drop(block); };
    UNetInputs streamed = in;
    streamed.after_block = &drop;
    expect_identical(a.unet->forward(streamed), b.unet->forward(in), "UNet streamed");
    Tensor latents({1, 4, 8, 8});
    for (int64_t i = 0; i < latents.numel(); ++i) latents[i] = float((i * 37) % 19) / 9.0f - 1.0f;
    expect_identical(a.vae->decode(latents), b.vae->decode(latents), "VAE decode");
}

INSTANTIATE_TEST_SUITE_P(Formats, GgufModel, ::testing::Values(DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// --weights q8_0 on a float file quantizes what models/quant_policy.h picks, and those matrices are blocks.
TEST(GgufModel, WeightsOptionQuantizesAtLoad) {
    LoadOptions o;
    o.weights = DType::Q8_0;
    const StableDiffusionModel m = load_model(data_path("sd15-mini/sd15-mini.safetensors"), o);
    const StableDiffusionModel f = load_model(data_path("sd15-mini/sd15-mini.safetensors"));
    const FixtureUNetCall call;
    const UNetInputs in = call.inputs();
    const Tensor yq = m.unet->forward(in), y = f.unet->forward(in);
    // Quantized, so not identical; close, as 8-bit weights allow (docs/QUANT.md has the measured errors of
    // whole images). A relative error of 2^-7 per weight through a few dozen layers stays well under 10%.
    const double err = kiln::test::relative_error(yq, y);
    EXPECT_GT(err, 0.0);
    EXPECT_LT(err, 0.1);
    std::printf("[ q8_0 ] sd15-mini UNet relative error %.2e\n", err);
}
