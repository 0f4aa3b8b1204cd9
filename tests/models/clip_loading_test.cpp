// Loading CLIP text encoders: config.json parsing, the single-file name tables and config inference,
// and the errors a damaged file gives.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <unistd.h>

#include "common/fixtures.h"
#include "io/safetensors.h"
#include "kiln/error.h"
#include "models/clip/clip_single_file.h"
#include "models/clip/clip_text_model.h"

using namespace kiln;
using kiln::test::data_path;

namespace {

std::shared_ptr<const SafetensorsFile> open_shared(const std::string& path) {
    return std::make_shared<const SafetensorsFile>(SafetensorsFile::open(path));
}

// A fresh directory for this test's files, removed at the end.
class TempDir {
public:
    TempDir() {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        path_ = std::filesystem::temp_directory_path() /
                ("kiln_clip_" + std::to_string(::getpid()) + "_" + info->name());
        std::filesystem::remove_all(path_);
        std::filesystem::create_directories(path_);
    }
    ~TempDir() { std::filesystem::remove_all(path_); }
    std::string file(const std::string& name) const { return (path_ / name).string(); }

private:
    std::filesystem::path path_;
};

void expect_config_eq(const ClipTextConfig& a, const ClipTextConfig& b, const std::string& what) {
    EXPECT_EQ(a.hidden, b.hidden) << what;
    EXPECT_EQ(a.layers, b.layers) << what;
    EXPECT_EQ(a.heads, b.heads) << what;
    EXPECT_EQ(a.intermediate, b.intermediate) << what;
    EXPECT_EQ(a.act, b.act) << what;
    EXPECT_FLOAT_EQ(a.eps, b.eps) << what;
    EXPECT_EQ(a.max_positions, b.max_positions) << what;
    EXPECT_EQ(a.vocab, b.vocab) << what;
    EXPECT_EQ(a.projection_dim, b.projection_dim) << what;
}

// Runs `call`, which must throw kiln::Error of `kind` whose message contains every fragment.
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

// Every tensor of a file, as float32, in name order.
std::vector<std::pair<std::string, Tensor>> all_tensors(const SafetensorsFile& file) {
    std::vector<std::pair<std::string, Tensor>> out;
    for (const std::string& n : file.names()) out.emplace_back(n, file.load(n));
    return out;
}

}  // namespace

TEST(ClipConfig, ParsesTheFixtureConfigs) {
    const ClipTextConfig sd15 = load_clip_text_config(data_path("sd15-mini/diffusers/text_encoder/config.json"));
    EXPECT_EQ(sd15.hidden, 32);
    EXPECT_EQ(sd15.layers, 3);
    EXPECT_EQ(sd15.heads, 4);
    EXPECT_EQ(sd15.intermediate, 64);
    EXPECT_EQ(sd15.act, "quick_gelu");
    EXPECT_EQ(sd15.vocab, 49408);
    EXPECT_EQ(sd15.max_positions, 77);
    EXPECT_EQ(sd15.projection_dim, 0);  // a CLIPTextModel, although the file lists projection_dim 32
    const ClipTextConfig xl2 = load_clip_text_config(data_path("sdxl-mini/diffusers/text_encoder_2/config.json"));
    EXPECT_EQ(xl2.hidden, 48);
    EXPECT_EQ(xl2.act, "gelu");
    EXPECT_EQ(xl2.projection_dim, 48);  // CLIPTextModelWithProjection
}

TEST(ClipConfig, BadConfigsNameTheProblem) {
    expect_error([] { parse_clip_text_config("{ not json", "cfg.json"); }, ErrorKind::InvalidModel,
                 {"cfg.json", "JSON"});
    expect_error([] { parse_clip_text_config("[1, 2]", "cfg.json"); }, ErrorKind::InvalidModel, {"cfg.json"});
    expect_error([] { parse_clip_text_config(R"({"hidden_size": "big"})", "cfg.json"); }, ErrorKind::InvalidModel,
                 {"cfg.json", "hidden_size"});
    expect_error([] { parse_clip_text_config(R"({"hidden_size": 50, "num_attention_heads": 4})", "cfg.json"); },
                 ErrorKind::InvalidModel, {"cfg.json", "divisible"});
    expect_error([] { parse_clip_text_config(R"({"num_hidden_layers": 0})", "cfg.json"); },
                 ErrorKind::InvalidModel, {"num_hidden_layers"});
    expect_error([] { parse_clip_text_config(R"({"hidden_act": "relu"})", "cfg.json"); }, ErrorKind::Unsupported,
                 {"relu"});
    expect_error([] { load_clip_text_config("/nonexistent/config.json"); }, ErrorKind::IO, {"/nonexistent/config.json"});
}

TEST(ClipConfig, HeadsForHidden) {
    // The published configs: openai/clip-vit-large-patch14 (768, 12 heads), OpenCLIP ViT-H-14 text
    // tower (1024, 16), ViT-bigG-14 (1280, 20).
    EXPECT_EQ(clip_heads_for_hidden(768), 12);
    EXPECT_EQ(clip_heads_for_hidden(1024), 16);
    EXPECT_EQ(clip_heads_for_hidden(1280), 20);
    // The rule holds for every fixture encoder.
    for (const char* cfg : {"sd15-mini/diffusers/text_encoder/config.json", "sd2-mini/diffusers/text_encoder/config.json",
                            "sdxl-mini/diffusers/text_encoder/config.json",
                            "sdxl-mini/diffusers/text_encoder_2/config.json"}) {
        const ClipTextConfig c = load_clip_text_config(data_path(cfg));
        EXPECT_EQ(clip_heads_for_hidden(c.hidden), c.heads) << cfg;
    }
    expect_error([] { clip_heads_for_hidden(1000); }, ErrorKind::Unsupported, {"1000"});
    expect_error([] { clip_heads_for_hidden(0); }, ErrorKind::Unsupported, {"width 0"});
}

TEST(ClipSingleFile, InferredConfigsMatchTheDiffusersConfigs) {
    struct Case {
        const char* model;
        const char* prefix;
        bool openclip;
        const char* folder;
    };
    for (const Case& c : {Case{"sd15-mini", kSd1ClipPrefix, false, "text_encoder"},
                          Case{"sd2-mini", kSd2OpenClipPrefix, true, "text_encoder"},
                          Case{"sdxl-mini", kSdxlClipPrefix, false, "text_encoder"},
                          Case{"sdxl-mini", kSdxlOpenClipPrefix, true, "text_encoder_2"}}) {
        SafetensorsFile file = SafetensorsFile::open(data_path(std::string(c.model) + "/" + c.model + ".safetensors"));
        EXPECT_EQ(has_openclip_layout(file, c.prefix), c.openclip) << c.model;
        EXPECT_EQ(has_clip_hf_layout(file, c.prefix), !c.openclip) << c.model;
        const ClipSingleFile layout = c.openclip ? openclip_layout(file, c.prefix) : clip_hf_layout(file, c.prefix);
        const std::string dir = data_path(std::string(c.model) + "/diffusers/" + c.folder + "/");
        expect_config_eq(layout.config, load_clip_text_config(dir + "config.json"), c.model);
        // The table names exactly the tensors of the diffusers file.
        SafetensorsFile diffusers = SafetensorsFile::open(dir + "model.safetensors");
        std::vector<std::string> mapped;
        for (const auto& [name, m] : layout.table) mapped.push_back(name);
        EXPECT_EQ(mapped, diffusers.names()) << c.model;
    }
}

TEST(ClipSingleFile, OpenClipProjectionIsTransposedForSdxlAndUnusedForSd2) {
    SafetensorsFile xl = SafetensorsFile::open(data_path("sdxl-mini/sdxl-mini.safetensors"));
    const ClipSingleFile l = openclip_layout(xl, kSdxlOpenClipPrefix);
    ASSERT_TRUE(l.table.count("text_projection.weight"));
    EXPECT_EQ(l.table.at("text_projection.weight").op, WeightMapping::Op::Transpose);
    EXPECT_EQ(l.table.at("text_model.encoder.layers.1.self_attn.k_proj.weight").op, WeightMapping::Op::RowSlice);
    EXPECT_EQ(l.table.at("text_model.encoder.layers.1.self_attn.k_proj.weight").part, 1);
    SafetensorsFile sd2 = SafetensorsFile::open(data_path("sd2-mini/sd2-mini.safetensors"));
    EXPECT_TRUE(sd2.has("cond_stage_model.model.text_projection"));
    EXPECT_FALSE(openclip_layout(sd2, kSd2OpenClipPrefix).table.count("text_projection.weight"));
}

TEST(ClipSingleFile, Sd2DropsTheLastOfViTHs24Resblocks) {
    // A tiny OpenCLIP tower with ViT-H's 24 resblocks, written under both OpenCLIP prefixes.
    TempDir dir;
    auto tower = [](const std::string& prefix) {
        const int64_t h = 8;
        std::vector<std::pair<std::string, Tensor>> t = {
            {prefix + "token_embedding.weight", Tensor({10, h})},
            {prefix + "positional_embedding", Tensor({4, h})},
            {prefix + "ln_final.weight", Tensor({h})},
            {prefix + "ln_final.bias", Tensor({h})},
            {prefix + "text_projection", Tensor({h, 6})},
            {prefix + "logit_scale", Tensor(Shape{})}};
        for (int i = 0; i < 24; ++i) {
            const std::string p = prefix + "transformer.resblocks." + std::to_string(i) + ".";
            for (const char* ln : {"ln_1", "ln_2"}) {
                t.push_back({p + ln + ".weight", Tensor({h})});
                t.push_back({p + ln + ".bias", Tensor({h})});
            }
            t.push_back({p + "attn.in_proj_weight", Tensor({3 * h, h})});
            t.push_back({p + "attn.in_proj_bias", Tensor({3 * h})});
            t.push_back({p + "attn.out_proj.weight", Tensor({h, h})});
            t.push_back({p + "attn.out_proj.bias", Tensor({h})});
            t.push_back({p + "mlp.c_fc.weight", Tensor({2 * h, h})});
            t.push_back({p + "mlp.c_fc.bias", Tensor({2 * h})});
            t.push_back({p + "mlp.c_proj.weight", Tensor({h, 2 * h})});
            t.push_back({p + "mlp.c_proj.bias", Tensor({h})});
        }
        return t;
    };
    write_safetensors(dir.file("sd2.safetensors"), tower(kSd2OpenClipPrefix));
    write_safetensors(dir.file("xl.safetensors"), tower(kSdxlOpenClipPrefix));

    auto sd2 = open_shared(dir.file("sd2.safetensors"));
    const ClipSingleFile a = openclip_layout(*sd2, kSd2OpenClipPrefix);
    EXPECT_EQ(a.config.layers, 23);
    EXPECT_EQ(a.config.projection_dim, 0);
    EXPECT_EQ(a.config.intermediate, 16);
    EXPECT_FALSE(a.table.count("text_model.encoder.layers.23.mlp.fc1.weight"));
    EXPECT_TRUE(a.table.count("text_model.encoder.layers.22.mlp.fc1.weight"));
    // The table loads as a model: every mapped tensor is used, none is missing.
    MappedSource source(sd2, a.table, "text encoder");
    EXPECT_NO_THROW(ClipTextModel::load(source, a.config));

    auto xl = open_shared(dir.file("xl.safetensors"));
    const ClipSingleFile b = openclip_layout(*xl, kSdxlOpenClipPrefix);
    EXPECT_EQ(b.config.layers, 24);
    EXPECT_EQ(b.config.projection_dim, 6);  // text_projection [hidden, 6] stored as x @ P
    MappedSource source_b(xl, b.table, "text encoder 2");
    EXPECT_NO_THROW(ClipTextModel::load(source_b, b.config));
}

TEST(ClipSingleFile, UnknownTensorsUnderThePrefixAreErrors) {
    TempDir dir;
    SafetensorsFile sd15 = SafetensorsFile::open(data_path("sd15-mini/sd15-mini.safetensors"));
    std::vector<std::pair<std::string, Tensor>> t;
    for (const std::string& n : sd15.names())
        if (n.rfind(kSd1ClipPrefix, 0) == 0) t.emplace_back(n, sd15.load(n));
    t.emplace_back(std::string(kSd1ClipPrefix) + "text_model.encoder.layers.0.mlp.fc3.weight", Tensor({2, 2}));
    write_safetensors(dir.file("extra.safetensors"), t);
    SafetensorsFile extra = SafetensorsFile::open(dir.file("extra.safetensors"));
    expect_error([&] { clip_hf_layout(extra, kSd1ClipPrefix); }, ErrorKind::InvalidModel,
                 {"layers.0.mlp.fc3.weight", "extra.safetensors"});

    SafetensorsFile sd2 = SafetensorsFile::open(data_path("sd2-mini/sd2-mini.safetensors"));
    t.clear();
    for (const std::string& n : sd2.names())
        if (n.rfind(kSd2OpenClipPrefix, 0) == 0) t.emplace_back(n, sd2.load(n));
    t.emplace_back(std::string(kSd2OpenClipPrefix) + "transformer.resblocks.1.attn.in_proj", Tensor({2}));
    write_safetensors(dir.file("extra2.safetensors"), t);
    SafetensorsFile extra2 = SafetensorsFile::open(dir.file("extra2.safetensors"));
    expect_error([&] { openclip_layout(extra2, kSd2OpenClipPrefix); }, ErrorKind::InvalidModel,
                 {"resblocks.1.attn.in_proj'"});
    // A prefix with nothing under it.
    expect_error([&] { openclip_layout(sd2, kSdxlOpenClipPrefix); }, ErrorKind::InvalidModel, {"token_embedding"});
}

TEST(ClipLoad, WrongShapeMissingAndUnexpectedTensorsAreNamed) {
    TempDir dir;
    const std::string src = data_path("sdxl-mini/diffusers/text_encoder_2/");
    const ClipTextConfig config = load_clip_text_config(src + "config.json");
    const auto tensors = all_tensors(SafetensorsFile::open(src + "model.safetensors"));
    auto load = [&](const std::vector<std::pair<std::string, Tensor>>& t) {
        write_safetensors(dir.file("model.safetensors"), t);
        FileSource source(open_shared(dir.file("model.safetensors")));
        return ClipTextModel::load(source, config);
    };
    const std::string victim = "text_model.encoder.layers.1.mlp.fc2.weight";

    auto wrong_shape = tensors;
    for (auto& [n, t] : wrong_shape)
        if (n == victim) t = Tensor({96, 48});  // transposed
    expect_error([&] { load(wrong_shape); }, ErrorKind::InvalidModel, {victim, "[96, 48]", "[48, 96]"});

    auto missing = tensors;
    std::erase_if(missing, [&](const auto& p) { return p.first == victim; });
    expect_error([&] { load(missing); }, ErrorKind::InvalidModel, {"missing", victim});

    auto projection_missing = tensors;
    std::erase_if(projection_missing, [&](const auto& p) { return p.first == "text_projection.weight"; });
    expect_error([&] { load(projection_missing); }, ErrorKind::InvalidModel, {"text_projection.weight"});

    auto extra = tensors;
    extra.emplace_back("text_model.encoder.layers.3.mlp.fc1.weight", Tensor({96, 48}));
    expect_error([&] { load(extra); }, ErrorKind::InvalidModel, {"unexpected", "layers.3.mlp.fc1.weight"});

    EXPECT_NO_THROW(load(tensors));
}

TEST(ClipLoad, MappedSourceErrorsNameTheFileTensor) {
    // A fused in_proj of the wrong size in a single file fails at load with the tensor named.
    TempDir dir;
    SafetensorsFile sd2 = SafetensorsFile::open(data_path("sd2-mini/sd2-mini.safetensors"));
    std::vector<std::pair<std::string, Tensor>> t;
    const std::string victim = std::string(kSd2OpenClipPrefix) + "transformer.resblocks.2.attn.in_proj_weight";
    for (const std::string& n : sd2.names())
        if (n.rfind(kSd2OpenClipPrefix, 0) == 0) t.emplace_back(n, n == victim ? Tensor({150, 48}) : sd2.load(n));
    write_safetensors(dir.file("bad.safetensors"), t);
    auto file = open_shared(dir.file("bad.safetensors"));
    const ClipSingleFile layout = openclip_layout(*file, kSd2OpenClipPrefix);
    MappedSource source(file, layout.table, "text encoder");
    expect_error([&] { ClipTextModel::load(source, layout.config); }, ErrorKind::InvalidModel,
                 {"self_attn.q_proj.weight", "[50, 48]"});
}
