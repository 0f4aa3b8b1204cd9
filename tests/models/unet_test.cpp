// UNet conformance with diffusers' UNet2DConditionModel (tests/data/<model>/modules.safetensors),
// loading the weights from both file layouts.
#include <gtest/gtest.h>

#include <memory>
#include <optional>

#include "core/memory.h"

#include "common/fixtures.h"
#include "io/safetensors.h"
#include "models/unet/unet.h"

using namespace kiln;
using kiln::test::data_path;

namespace {

struct Case {
    std::string model;
    HeadRule rule;
    int pooled_dim;  // SDXL's pooled text width (the second text encoder's projection)
};

std::vector<Case> cases() {
    return {{"sd15-mini", HeadRule::FixedCount, 0}, {"sd2-mini", HeadRule::FixedWidth, 0},
            {"sdxl-mini", HeadRule::FixedWidth, 48}};
}

// The fixtures come from fp16 weights evaluated in float32; a float32 implementation that sums in
// another order differs by rounding only (2^-24 per operation, growing with depth and with the
// dot-product lengths). Through ~60 layers with attention and normalisations the observed error is
// 0.8e-6 to 3.2e-6 of the output's scale; 2e-5 leaves room for other BLAS kernels and CPUs while a
// real mistake (a wrong tensor, head count or eps) shows as 1e-3 or more.
constexpr double kTolerance = 2e-5;

void check_unet(const UNet& unet, const std::string& model) {
    SafetensorsFile ref = SafetensorsFile::open(data_path(model + "/modules.safetensors"));
    for (const std::string shape : {"sq", "wide"}) {
        const std::string p = "unet." + shape + ".";
        Tensor sample = ref.load(p + "sample"), context = ref.load(p + "context"), t = ref.load(p + "timestep");
        UNetInputs in;
        in.sample = &sample;
        in.context = &context;
        in.timesteps = &t;
        Tensor text_embeds, time_ids;
        if (ref.has(p + "text_embeds")) {
            text_embeds = ref.load(p + "text_embeds");
            time_ids = ref.load(p + "time_ids");
            in.text_embeds = &text_embeds;
            in.time_ids = &time_ids;
        }
        const double err = kiln::test::relative_error(unet.forward(in), ref.load(p + "out"));
        EXPECT_LT(err, kTolerance) << model << " " << shape;
        std::printf("[ unet ] %s %s relative error %.2e\n", model.c_str(), shape.c_str(), err);
    }
}

}  // namespace

TEST(UNet, MatchesDiffusersFromDiffusersFolder) {
    for (const Case& c : cases()) {
        auto file = std::make_shared<const SafetensorsFile>(
            SafetensorsFile::open(data_path(c.model + "/diffusers/unet/diffusion_pytorch_model.safetensors")));
        UNetConfig config = unet_config_from_json(kiln::test::read_json(data_path(c.model + "/diffusers/unet/config.json")));
        check_unet(UNet::load(FileSource(file), config), c.model);
    }
}

TEST(UNet, MatchesDiffusersFromSingleFile) {
    for (const Case& c : cases()) {
        auto file = std::make_shared<const SafetensorsFile>(
            SafetensorsFile::open(data_path(c.model + "/" + c.model + ".safetensors")));
        std::vector<std::string> unknown;
        auto table = unet_table_from_ldm(*file, "model.diffusion_model.", &unknown);
        EXPECT_TRUE(unknown.empty()) << c.model << ": " << (unknown.empty() ? "" : unknown[0]);
        MappedSource source(file, table, "UNet");
        UNetConfig inferred = unet_config_from_ldm(source, c.rule, c.pooled_dim);
        UNetConfig expected =
            unet_config_from_json(kiln::test::read_json(data_path(c.model + "/diffusers/unet/config.json")));
        EXPECT_EQ(inferred.block_out_channels, expected.block_out_channels) << c.model;
        EXPECT_EQ(inferred.level_has_attention, expected.level_has_attention) << c.model;
        EXPECT_EQ(inferred.heads, expected.heads) << c.model;
        EXPECT_EQ(inferred.transformer_depth, expected.transformer_depth) << c.model;
        EXPECT_EQ(inferred.mid_transformer_depth, expected.mid_transformer_depth) << c.model;
        EXPECT_EQ(inferred.layers_per_block, expected.layers_per_block) << c.model;
        EXPECT_EQ(inferred.cross_attention_dim, expected.cross_attention_dim) << c.model;
        EXPECT_EQ(inferred.addition_time_embed_dim, expected.addition_time_embed_dim) << c.model;
        EXPECT_EQ(inferred.norm_groups, expected.norm_groups) << c.model;
        check_unet(UNet::load(source, inferred), c.model);
    }
}

// Messages about tensors a single file lacks name them as the file would: the inverse of the
// rename table must give back every original name.
TEST(UNet, OriginalNamesInvertTheTable) {
    for (const Case& c : cases()) {
        auto file = std::make_shared<const SafetensorsFile>(
            SafetensorsFile::open(data_path(c.model + "/" + c.model + ".safetensors")));
        auto table = unet_table_from_ldm(*file, "model.diffusion_model.", nullptr);
        const UNetConfig config = unet_config_from_ldm(MappedSource(file, table, "UNet"), c.rule, c.pooled_dim);
        ASSERT_GT(table.size(), 100u);
        for (const auto& [name, mapping] : table)
            EXPECT_EQ(unet_ldm_name(name, config, "model.diffusion_model."), mapping.file_name) << c.model << " " << name;
    }
}

// Weights stay in the file's precision (the fixtures are fp16): the UNet then holds about half the
// bytes of a float32 load (norms and biases stay float32) and computes exactly the same numbers, since
// F16 -> float32 is exact and the ops convert before the same sgemm calls. --weights f32 restores the
// float32 copy.
TEST(UNet, KeepsFp16WeightsAtHalfTheMemoryWithTheSameResult) {
    const Case c = cases()[0];
    auto file = std::make_shared<const SafetensorsFile>(
        SafetensorsFile::open(data_path(c.model + "/diffusers/unet/diffusion_pytorch_model.safetensors")));
    const UNetConfig config =
        unet_config_from_json(kiln::test::read_json(data_path(c.model + "/diffusers/unet/config.json")));
    auto held_by = [&](std::optional<DType> weights, std::unique_ptr<UNet>& out) {
        FileSource source(file);
        source.weights_dtype = weights;
        const int64_t before = memory_stats().device("cpu").total.current;
        out = std::make_unique<UNet>(UNet::load(source, config));
        return memory_stats().device("cpu").total.current - before;
    };
    std::unique_ptr<UNet> stored, f32;
    const int64_t stored_bytes = held_by(std::nullopt, stored), f32_bytes = held_by(DType::F32, f32);
    std::printf("[ unet ] %s weights held: %lld bytes as stored (F16), %lld as float32\n", c.model.c_str(),
                static_cast<long long>(stored_bytes), static_cast<long long>(f32_bytes));
    EXPECT_LT(stored_bytes, f32_bytes * 0.55);
    EXPECT_GT(stored_bytes, f32_bytes * 0.5);

    SafetensorsFile ref = SafetensorsFile::open(data_path(c.model + "/modules.safetensors"));
    Tensor sample = ref.load("unet.wide.sample"), context = ref.load("unet.wide.context");
    UNetInputs in;
    in.sample = &sample;
    in.context = &context;
    const Tensor timesteps = ref.load("unet.wide.timestep");
    in.timesteps = &timesteps;
    EXPECT_LT(kiln::test::relative_error(stored->forward(in), f32->forward(in)), 1e-7);
    check_unet(*stored, c.model);
}
