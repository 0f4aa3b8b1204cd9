// Loading the VAE: config.json parsing, the single-file name table and config inference, and the
// errors a damaged file gives.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <unistd.h>

#include "common/fixtures.h"
#include "io/safetensors.h"
#include "kiln/error.h"
#include "models/vae/vae.h"
#include "models/vae/vae_single_file.h"

using namespace kiln;
using kiln::test::data_path;

namespace {

std::shared_ptr<const SafetensorsFile> open_shared(const std::string& path) {
    return std::make_shared<const SafetensorsFile>(SafetensorsFile::open(path));
}

class TempDir {
public:
    TempDir() {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        path_ = std::filesystem::temp_directory_path() /
                ("kiln_vae_" + std::to_string(::getpid()) + "_" + info->name());
        std::filesystem::remove_all(path_);
        std::filesystem::create_directories(path_);
    }
    ~TempDir() { std::filesystem::remove_all(path_); }
    std::string file(const std::string& name) const { return (path_ / name).string(); }

private:
    std::filesystem::path path_;
};

template <typename F>
void expect_error(F&& call, ErrorKind kind, const std::vector<std::string>& fragments) {
    try {
        call();
        ADD_FAILURE() << "no error; expected one mentioning " << fragments[0];
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), kind) << e.what();
        for (const std::string& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
    }
}

}  // namespace

TEST(VaeConfig, ParsesTheFixtureConfigs) {
    const VaeConfig c = load_vae_config(data_path("sdxl-mini/diffusers/vae/config.json"));
    EXPECT_EQ(c.block_out_channels, (std::vector<int>{8, 16, 32, 32}));
    EXPECT_EQ(c.layers_per_block, 2);
    EXPECT_EQ(c.latent_channels, 4);
    EXPECT_EQ(c.norm_num_groups, 8);
    EXPECT_FLOAT_EQ(c.scaling_factor, 0.13025f);
    EXPECT_TRUE(c.mid_block_add_attention);
    EXPECT_TRUE(c.use_quant_conv);
    EXPECT_TRUE(c.use_post_quant_conv);
    EXPECT_EQ(c.downsample_factor(), 8);
    EXPECT_FLOAT_EQ(load_vae_config(data_path("sd15-mini/diffusers/vae/config.json")).scaling_factor, 0.18215f);
}

TEST(VaeConfig, BadConfigsNameTheProblem) {
    expect_error([] { parse_vae_config("nope", "vae.json"); }, ErrorKind::InvalidModel, {"vae.json", "JSON"});
    expect_error([] { parse_vae_config(R"({"block_out_channels": 8})", "vae.json"); }, ErrorKind::InvalidModel,
                 {"block_out_channels"});
    expect_error([] { parse_vae_config(R"({"block_out_channels": [8, 12], "norm_num_groups": 8})", "vae.json"); },
                 ErrorKind::InvalidModel, {"12"});
    expect_error([] { parse_vae_config(R"({"layers_per_block": 0})", "vae.json"); }, ErrorKind::InvalidModel,
                 {"layers_per_block"});
    expect_error([] { parse_vae_config(R"({"use_quant_conv": "yes"})", "vae.json"); }, ErrorKind::InvalidModel,
                 {"use_quant_conv"});
    expect_error([] { parse_vae_config(R"({"_class_name": "AutoencoderTiny"})", "vae.json"); },
                 ErrorKind::Unsupported, {"AutoencoderTiny"});
    expect_error([] { parse_vae_config(R"({"down_block_types": ["DownBlock2D"]})", "vae.json"); },
                 ErrorKind::Unsupported, {"DownBlock2D"});
    expect_error([] { parse_vae_config(R"({"act_fn": "gelu"})", "vae.json"); }, ErrorKind::Unsupported, {"gelu"});
    expect_error([] { load_vae_config("/nonexistent/vae.json"); }, ErrorKind::IO, {"/nonexistent/vae.json"});
}

TEST(VaeConfig, NormGroupsForChannels) {
    EXPECT_EQ(vae_norm_groups_for_channels(128), 32);  // SD 1.x/2.x/XL VAEs: 32 groups (diffusers configs)
    EXPECT_EQ(vae_norm_groups_for_channels(8), load_vae_config(data_path("sd15-mini/diffusers/vae/config.json")).norm_num_groups);
    expect_error([] { vae_norm_groups_for_channels(0); }, ErrorKind::InvalidModel, {"0 channels"});
}

TEST(VaeSingleFile, InferredConfigAndTableMatchTheDiffusersFolder) {
    for (const char* model : {"sd15-mini", "sd2-mini", "sdxl-mini"}) {
        const std::string m = model;
        SafetensorsFile file = SafetensorsFile::open(data_path(m + "/" + m + ".safetensors"));
        ASSERT_TRUE(has_ldm_vae(file));
        const VaeConfig ref = load_vae_config(data_path(m + "/diffusers/vae/config.json"));
        const VaeSingleFile layout = ldm_vae_layout(file, ref.scaling_factor);
        EXPECT_EQ(layout.config.block_out_channels, ref.block_out_channels) << m;
        EXPECT_EQ(layout.config.layers_per_block, ref.layers_per_block) << m;
        EXPECT_EQ(layout.config.in_channels, ref.in_channels) << m;
        EXPECT_EQ(layout.config.out_channels, ref.out_channels) << m;
        EXPECT_EQ(layout.config.latent_channels, ref.latent_channels) << m;
        EXPECT_EQ(layout.config.norm_num_groups, ref.norm_num_groups) << m;
        EXPECT_EQ(layout.config.mid_block_add_attention, ref.mid_block_add_attention) << m;
        EXPECT_EQ(layout.config.use_quant_conv, ref.use_quant_conv) << m;
        EXPECT_EQ(layout.config.use_post_quant_conv, ref.use_post_quant_conv) << m;
        EXPECT_FLOAT_EQ(layout.config.scaling_factor, ref.scaling_factor) << m;

        SafetensorsFile diffusers = SafetensorsFile::open(data_path(m + "/diffusers/vae/diffusion_pytorch_model.safetensors"));
        std::vector<std::string> mapped;
        for (const auto& [name, mapping] : layout.table) mapped.push_back(name);
        EXPECT_EQ(mapped, diffusers.names()) << m;
    }
}

TEST(VaeSingleFile, DecoderLevelsAreReversedAndAttentionConvsSqueezed) {
    SafetensorsFile file = SafetensorsFile::open(data_path("sd15-mini/sd15-mini.safetensors"));
    const VaeSingleFile l = ldm_vae_layout(file, 0.18215f);
    EXPECT_EQ(l.table.at("decoder.up_blocks.3.resnets.0.conv_shortcut.weight").file_name,
              "first_stage_model.decoder.up.0.block.0.nin_shortcut.weight");
    EXPECT_EQ(l.table.at("decoder.up_blocks.0.upsamplers.0.conv.weight").file_name,
              "first_stage_model.decoder.up.3.upsample.conv.weight");
    EXPECT_EQ(l.table.at("encoder.mid_block.attentions.0.to_out.0.weight").op, WeightMapping::Op::Squeeze);
    EXPECT_EQ(l.table.at("encoder.mid_block.attentions.0.to_out.0.bias").op, WeightMapping::Op::Copy);
    EXPECT_EQ(l.table.at("decoder.conv_norm_out.weight").file_name, "first_stage_model.decoder.norm_out.weight");
}

TEST(VaeSingleFile, UnknownTensorsUnderThePrefixAreErrors) {
    TempDir dir;
    SafetensorsFile sd15 = SafetensorsFile::open(data_path("sd15-mini/sd15-mini.safetensors"));
    std::vector<std::pair<std::string, Tensor>> t;
    for (const std::string& n : sd15.names())
        if (n.rfind(kLdmVaePrefix, 0) == 0) t.emplace_back(n, sd15.load(n));
    auto with_extra = [&](const std::string& extra) {
        auto copy = t;
        copy.emplace_back(std::string(kLdmVaePrefix) + extra, Tensor({2}));
        write_safetensors(dir.file("extra.safetensors"), copy);
        SafetensorsFile f = SafetensorsFile::open(dir.file("extra.safetensors"));
        return ldm_vae_layout(f, 0.18215f);
    };
    for (const char* extra : {"encoder.down.1.block.0.norm3.weight", "decoder.mid.attn_1.qkv.weight",
                              "decoder.up.2.downsample.conv.weight", "loss.logvar", "encoder.down.x.block.0.conv1.bias"})
        expect_error([&] { with_extra(extra); }, ErrorKind::InvalidModel, {extra, "extra.safetensors"});
    // A checkpoint without a VAE.
    SafetensorsFile empty_vae = SafetensorsFile::open(data_path("sd15-mini/diffusers/vae/diffusion_pytorch_model.safetensors"));
    EXPECT_FALSE(has_ldm_vae(empty_vae));
    expect_error([&] { ldm_vae_layout(empty_vae, 0.18215f); }, ErrorKind::InvalidModel, {"no VAE encoder"});
}

TEST(VaeLoad, WrongShapeMissingAndUnexpectedTensorsAreNamed) {
    TempDir dir;
    const std::string src = data_path("sd2-mini/diffusers/vae/");
    const VaeConfig config = load_vae_config(src + "config.json");
    SafetensorsFile original = SafetensorsFile::open(src + "diffusion_pytorch_model.safetensors");
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const std::string& n : original.names()) tensors.emplace_back(n, original.load(n));
    auto load = [&](const std::vector<std::pair<std::string, Tensor>>& t) {
        write_safetensors(dir.file("vae.safetensors"), t);
        FileSource source(open_shared(dir.file("vae.safetensors")));
        return Vae::load(source, config);
    };
    const std::string victim = "decoder.up_blocks.2.resnets.0.conv_shortcut.weight";  // 32 -> 16 channels

    auto wrong_shape = tensors;
    for (auto& [n, t] : wrong_shape)
        if (n == victim) t = Tensor({16, 32, 3, 3});
    expect_error([&] { load(wrong_shape); }, ErrorKind::InvalidModel, {victim, "[16, 32, 3, 3]", "[16, 32, 1, 1]"});

    auto missing = tensors;
    std::erase_if(missing, [&](const auto& p) { return p.first == victim; });
    expect_error([&] { load(missing); }, ErrorKind::InvalidModel, {"missing", victim});

    auto extra = tensors;
    extra.emplace_back("decoder.up_blocks.0.resnets.3.conv1.weight", Tensor({32, 32, 3, 3}));
    expect_error([&] { load(extra); }, ErrorKind::InvalidModel, {"unexpected", "up_blocks.0.resnets.3.conv1.weight"});

    EXPECT_NO_THROW(load(tensors));

    // A config that does not fit the weights names the first tensor that disagrees.
    VaeConfig wider = config;
    wider.latent_channels = 8;
    FileSource source(open_shared(src + "diffusion_pytorch_model.safetensors"));
    expect_error([&] { Vae::load(source, wider); }, ErrorKind::InvalidModel, {"encoder.conv_out.weight"});
}

// Without the encoder (txt2img), encoder.* and quant_conv.* are neither read nor required: a file that
// lacks them loads, the full load names what is missing, and such a VAE refuses to encode.
TEST(VaeLoad, DecoderOnlyNeedsNoEncoderTensors) {
    TempDir dir;
    const std::string src = data_path("sd15-mini/diffusers/vae/");
    const VaeConfig config = load_vae_config(src + "config.json");
    SafetensorsFile original = SafetensorsFile::open(src + "diffusion_pytorch_model.safetensors");
    std::vector<std::pair<std::string, Tensor>> decoder;
    for (const std::string& n : original.names())
        if (n.rfind("encoder.", 0) != 0 && n.rfind("quant_conv.", 0) != 0) decoder.emplace_back(n, original.load(n));
    ASSERT_LT(decoder.size(), original.names().size());
    write_safetensors(dir.file("decoder.safetensors"), decoder);
    FileSource source(open_shared(dir.file("decoder.safetensors")));
    expect_error([&] { Vae::load(source, config); }, ErrorKind::InvalidModel, {"missing", "encoder."});
    const Vae vae = Vae::load(source, config, false);
    EXPECT_FALSE(vae.has_encoder());
    EXPECT_EQ(vae.decode(Tensor({1, 4, 3, 5})).shape(), (Shape{1, 3, 24, 40}));
    expect_error([&] { vae.encode(Tensor({1, 3, 16, 16})); }, ErrorKind::InvalidArgument, {"without its encoder"});
}
