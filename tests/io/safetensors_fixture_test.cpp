// Reading the real files produced by torch/safetensors in tests/data.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "io_test_util.h"

using namespace kiln;

namespace {

const std::string kData = KILN_TEST_DATA;
const std::string kSd15 = kData + "/sd15-mini/sd15-mini.safetensors";

nlohmann::json read_json(const std::string& path) {
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << path;
    return nlohmann::json::parse(in);
}

int64_t cfg(const nlohmann::json& j, const char* key) { return j.at(key).get<int64_t>(); }

}  // namespace

TEST(SafetensorsFixtures, Sd15SingleFileHasAllTensors) {
    SafetensorsFile f = SafetensorsFile::open(kSd15);
    EXPECT_EQ(f.path(), kSd15);
    std::vector<std::string> names = f.names();
    EXPECT_EQ(names.size(), 997u);  // tests/data/README.md: the full SD1 single-file tree
    EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
    EXPECT_EQ(f.file_size(), std::filesystem::file_size(kSd15));
    EXPECT_TRUE(f.metadata().empty());

    // Every tensor loads, and every one but the I64 buffer and the float32 DDPM buffers is fp16.
    int f16 = 0, f32 = 0, i64 = 0;
    for (const std::string& name : names) {
        const TensorInfo& info = f.info(name);
        Tensor t = f.load(name);
        ASSERT_EQ(t.shape(), info.shape) << name;
        ASSERT_EQ(static_cast<uint64_t>(t.numel()) * dtype_size(info.dtype), info.nbytes) << name;
        f16 += info.dtype == DType::F16;
        f32 += info.dtype == DType::F32;
        i64 += info.dtype == DType::I64;
    }
    EXPECT_EQ(i64, 1);
    EXPECT_GT(f32, 0);
    EXPECT_EQ(f16 + f32 + i64, 997);
}

TEST(SafetensorsFixtures, Sd15PositionIdsAreAnInt64Range) {
    SafetensorsFile f = SafetensorsFile::open(kSd15);
    const std::string name = "cond_stage_model.transformer.text_model.embeddings.position_ids";
    const TensorInfo& info = f.info(name);
    EXPECT_EQ(info.dtype, DType::I64);
    const nlohmann::json text = read_json(kData + "/sd15-mini/diffusers/text_encoder/config.json");
    const int64_t positions = cfg(text, "max_position_embeddings");
    EXPECT_EQ(info.shape, (Shape{1, positions}));
    // CLIP registers position_ids as arange(max_position_embeddings) (transformers' CLIPTextEmbeddings).
    Tensor ids = f.load(name);
    for (int64_t i = 0; i < positions; ++i) EXPECT_EQ(ids[i], static_cast<float>(i));

    Tensor tokens = f.load("cond_stage_model.transformer.text_model.embeddings.token_embedding.weight");
    EXPECT_EQ(tokens.shape(), (Shape{cfg(text, "vocab_size"), cfg(text, "hidden_size")}));
}

TEST(SafetensorsFixtures, Sd15UNetShapesFollowTheDiffusersConfig) {
    const nlohmann::json unet = read_json(kData + "/sd15-mini/diffusers/unet/config.json");
    const int64_t c0 = unet.at("block_out_channels")[0].get<int64_t>();
    const int64_t k_in = cfg(unet, "conv_in_kernel"), k_out = cfg(unet, "conv_out_kernel");
    const int64_t context = cfg(unet, "cross_attention_dim");
    SafetensorsFile f = SafetensorsFile::open(kSd15);
    const std::string p = "model.diffusion_model.";
    EXPECT_EQ(f.info(p + "input_blocks.0.0.weight").shape, (Shape{c0, cfg(unet, "in_channels"), k_in, k_in}));
    EXPECT_EQ(f.info(p + "out.2.weight").shape, (Shape{cfg(unet, "out_channels"), c0, k_out, k_out}));
    // The timestep embedding MLP widens the first block's channels four times (diffusers: time_embed_dim = 4 * c0).
    EXPECT_EQ(f.info(p + "time_embed.0.weight").shape, (Shape{4 * c0, c0}));
    // Cross-attention keys project the text context into the first level's channels.
    EXPECT_EQ(f.info(p + "input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight").shape, (Shape{c0, context}));
    // use_linear_projection is false: proj_in is a 1x1 convolution.
    ASSERT_FALSE(unet.at("use_linear_projection").get<bool>());
    EXPECT_EQ(f.info(p + "input_blocks.1.1.proj_in.weight").shape, (Shape{c0, c0, 1, 1}));
}

TEST(SafetensorsFixtures, SingleFileAndDiffusersFolderHoldTheSameWeights) {
    SafetensorsFile single = SafetensorsFile::open(kSd15);
    SafetensorsFile unet = SafetensorsFile::open(kData + "/sd15-mini/diffusers/unet/diffusion_pytorch_model.safetensors");
    EXPECT_EQ(unet.metadata().at("format"), "pt");
    Tensor a = single.load("model.diffusion_model.input_blocks.0.0.weight");
    Tensor b = unet.load("conv_in.weight");
    EXPECT_EQ(a.shape(), b.shape());
    EXPECT_EQ(a.values(), b.values());  // the same fp16 bits, decoded the same way
}

TEST(SafetensorsFixtures, ModulesFileIsFloat32) {
    SafetensorsFile f = SafetensorsFile::open(kData + "/sd15-mini/modules.safetensors");
    const TensorInfo& info = f.info("text1.input_ids");
    EXPECT_EQ(info.dtype, DType::F32);
    EXPECT_EQ(info.shape, (Shape{3, 77}));
    Tensor ids = f.load("text1.input_ids");
    const nlohmann::json text = read_json(kData + "/sd15-mini/diffusers/text_encoder/config.json");
    for (int row = 0; row < 3; ++row)  // every prompt starts with the BOS token
        EXPECT_EQ(ids[row * 77], static_cast<float>(cfg(text, "bos_token_id"))) << row;
}

TEST(SafetensorsFixtures, EveryFixtureFileOpensAndLoads) {
    int files = 0;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(kData)) {
        if (entry.path().extension() != ".safetensors") continue;
        SafetensorsFile f = SafetensorsFile::open(entry.path().string());
        for (const std::string& name : f.names())
            if (f.info(name).dtype != DType::BOOL) {
                EXPECT_EQ(f.load(name).shape(), f.info(name).shape);
            }
        ++files;
    }
    EXPECT_GT(files, 10);
}
