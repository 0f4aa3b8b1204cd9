// Files written by stable-diffusion.cpp's own converter (tests/data/gguf/sdcpp, made by
// scripts/make-sdcpp-gguf-fixtures.sh from tiny.safetensors): kiln reads its names, shapes and types, and its
// q8_0 blocks are exactly the blocks kiln's quantization makes of the same values. (Its q4_0 blocks are not:
// sd.cpp hands ggml an importance matrix of ones, which makes ggml search for each block's scale instead of
// using the reference rule kiln and gguf-py follow; the format, and so kiln's reading of it, is the same.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/dtype_convert.h"
#include "io/safetensors.h"

using namespace kiln;

namespace {

const std::string kDir = std::string(KILN_GGUF_DATA) + "/sdcpp/";

// What sd.cpp's converter quantizes here (its ModelLoader::tensor_should_be_converted): tensors whose innermost
// dimension is whole blocks, except biases and time_embed.; the 3x3 convolution (innermost 3) stays F16.
bool quantized_by_sdcpp(const std::string& name, const Shape& shape) {
    return shape.back() % 32 == 0 && name.find(".bias") == std::string::npos &&
           name.find("time_embed.") == std::string::npos;
}

}  // namespace

TEST(GgufFromSdcpp, TablesMatchTheSourceAndTheConvertersRule) {
    const SafetensorsFile src = SafetensorsFile::open(kDir + "tiny.safetensors");
    for (const char* q : {"q8_0", "q4_0"}) {
        const SafetensorsFile f = SafetensorsFile::open(kDir + "tiny-" + q + ".gguf");
        ASSERT_TRUE(f.is_gguf());
        EXPECT_EQ(f.names(), src.names()) << q;
        for (const std::string& name : src.names()) {
            const TensorInfo& ti = f.info(name);
            EXPECT_EQ(ti.shape, src.info(name).shape) << name;
            const bool quantized = quantized_by_sdcpp(name, ti.shape);
            EXPECT_EQ(ti.dtype, quantized ? (std::string(q) == "q8_0" ? DType::Q8_0 : DType::Q4_0) : DType::F16)
                << q << " " << name;
            if (!quantized)  // copied as they were
                EXPECT_EQ(0, std::memcmp(f.raw(name), src.raw(name), ti.nbytes)) << name;
        }
    }
}

TEST(GgufFromSdcpp, Q8_0BlocksAreKilnsBlocks) {
    const SafetensorsFile src = SafetensorsFile::open(kDir + "tiny.safetensors");
    const SafetensorsFile f = SafetensorsFile::open(kDir + "tiny-q8_0.gguf");
    int checked = 0;
    for (const std::string& name : src.names()) {
        const TensorInfo& ti = f.info(name);
        if (ti.dtype != DType::Q8_0) continue;
        const Tensor values = src.load(name);
        std::vector<uint8_t> ours(ti.nbytes);
        quantize_values(DType::Q8_0, values.data(), ours.data(), size_t(values.numel()));
        EXPECT_EQ(0, std::memcmp(ours.data(), f.raw(name), ti.nbytes)) << name;
        ++checked;
    }
    EXPECT_EQ(checked, 2);  // the projection and the norm weight
}

// sd.cpp's q4_0 blocks decode close to the source. A 4-bit code has 16 steps of about max|x| / 8; rounding to
// the nearest costs step / sqrt(12) RMS, about 9% of a Gaussian block's spread (max|x| ~ 2.5 sigma), and a
// searched scale clips a little more; 25% leaves room, while a tensor read from the wrong bytes or with the wrong
// shape is uncorrelated with the source (100% or more).
TEST(GgufFromSdcpp, Q4_0DecodesCloseToTheSource) {
    const SafetensorsFile src = SafetensorsFile::open(kDir + "tiny.safetensors");
    const SafetensorsFile f = SafetensorsFile::open(kDir + "tiny-q4_0.gguf");
    const std::string name = "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight";
    const Tensor x = src.load(name), y = f.load(name), stored = f.load_stored(name);
    ASSERT_EQ(stored.dtype(), DType::Q4_0);
    double err = 0, norm = 0, mean = 0;
    for (int64_t i = 0; i < x.numel(); ++i) mean += x[i] / double(x.numel());
    for (int64_t i = 0; i < x.numel(); ++i) {
        if (i == 3 * 32 + 5) continue;  // the one large value, set apart from the spread
        err += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
        norm += (double(x[i]) - mean) * (double(x[i]) - mean);
    }
    EXPECT_LT(std::sqrt(err / norm), 0.25);
    EXPECT_NEAR(y[3 * 32 + 5], 1.5f, 1.5 / 8);  // it sets its block's scale: within a step of itself
    const Tensor decoded = stored.to_f32();
    for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(decoded[i], y[i]);
}
