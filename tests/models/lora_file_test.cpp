// The LoRA reader: both namings, alpha, LoHa and LoKr by their definitions, and every malformed file a clear
// typed error. (Whole generations against diffusers: tests/pipeline/lora_conformance_test.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <set>

#include "io/fuzz_outcome.h"
#include "io/io_test_util.h"
#include "io/safetensors.h"
#include "kiln/error.h"
#include "models/lora/lora_file.h"

using namespace kiln;
using kiln::test::TempDir;

namespace {

using Tensors = std::vector<std::pair<std::string, Tensor>>;

Tensor counting(Shape shape, float step) {
    Tensor t(shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = step * float(i % 7 - 3);
    return t;
}

LoraFile read(const TempDir& dir, const Tensors& tensors, DType dtype = DType::F32) {
    write_safetensors(dir.file("l.safetensors"), tensors, dtype);
    return read_lora_file(dir.file("l.safetensors"));
}

void expect_error(const TempDir& dir, const Tensors& tensors, ErrorKind kind, const std::string& words) {
    try {
        read(dir, tensors);
        ADD_FAILURE() << "read, expected an error with '" << words << "'";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), kind) << e.what();
        EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
}

}  // namespace

TEST(LoraFile, KohyaNamingWithAlphaAndLoCon) {
    TempDir dir;
    const LoraFile f = read(dir, {{"lora_unet_down_blocks_0_resnets_0_conv1.lora_down.weight", counting({4, 8, 3, 3}, 0.5f)},
                                  {"lora_unet_down_blocks_0_resnets_0_conv1.lora_up.weight", counting({16, 4, 1, 1}, 0.25f)},
                                  {"lora_unet_down_blocks_0_resnets_0_conv1.alpha", Tensor(Shape{}, {2.0f})},
                                  {"lora_te_text_model_encoder_layers_0_self_attn_q_proj.lora_down.weight", counting({2, 32}, 1)},
                                  {"lora_te_text_model_encoder_layers_0_self_attn_q_proj.lora_up.weight", counting({32, 2}, 1)},
                                  {"lora_te2_text_model_encoder_layers_0_mlp_fc1.lora_down.weight", counting({2, 32}, 1)},
                                  {"lora_te2_text_model_encoder_layers_0_mlp_fc1.lora_up.weight", counting({64, 2}, 1)}});
    ASSERT_EQ(f.modules.size(), 3u);
    std::map<std::string, const LoraModule*> by_key;
    for (const LoraModule& m : f.modules) by_key[m.key] = &m;
    const LoraModule& conv = *by_key.at("lora_unet_down_blocks_0_resnets_0_conv1");
    EXPECT_EQ(conv.component, LoraComponent::UNet);
    EXPECT_EQ(conv.path, "down_blocks_0_resnets_0_conv1");
    EXPECT_EQ(conv.scale, 0.5);  // alpha / rank
    EXPECT_EQ(conv.out_features, 16);
    EXPECT_EQ(conv.in_numel, 72);
    const LoraModule& q = *by_key.at("lora_te_text_model_encoder_layers_0_self_attn_q_proj");
    EXPECT_EQ(q.component, LoraComponent::TextEncoder);
    EXPECT_EQ(q.scale, 1.0);  // no alpha
    EXPECT_EQ(by_key.at("lora_te2_text_model_encoder_layers_0_mlp_fc1")->component, LoraComponent::TextEncoder2);
    // up @ down, the [out, rank] x [rank, in x kh x kw] product.
    const Tensor d = lora_delta(conv);
    const Tensor up = counting({16, 4}, 0.25f), down = counting({4, 72}, 0.5f);
    for (int64_t o : {0, 7, 15})
        for (int64_t i : {0, 33, 71}) {
            double want = 0;
            for (int r = 0; r < 4; ++r) want += double(up.data()[o * 4 + r]) * down.data()[r * 72 + i];
            EXPECT_NEAR(d.data()[o * 72 + i], want, 1e-6 * (1 + std::fabs(want)));
        }
}

TEST(LoraFile, DiffusersAndPeftNamings) {
    TempDir dir;
    const LoraFile f =
        read(dir, {{"unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.lora_A.weight", counting({2, 16}, 1)},
                   {"unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.lora_B.weight", counting({16, 2}, 1)},
                   {"unet.mid_block.attentions.0.proj_in.lora.down.weight", counting({2, 16}, 1)},
                   {"unet.mid_block.attentions.0.proj_in.lora.up.weight", counting({16, 2}, 1)},
                   {"unet.up_blocks.1.attentions.0.transformer_blocks.0.attn2.processor.to_out_lora.down.weight", counting({2, 16}, 1)},
                   {"unet.up_blocks.1.attentions.0.transformer_blocks.0.attn2.processor.to_out_lora.up.weight", counting({16, 2}, 1)},
                   {"text_encoder_2.text_model.encoder.layers.1.self_attn.v_proj.lora_A.weight", counting({2, 32}, 1)},
                   {"text_encoder_2.text_model.encoder.layers.1.self_attn.v_proj.lora_B.weight", counting({32, 2}, 1)},
                   {"something_else.weight", counting({2}, 1)}});
    std::set<std::string> paths;
    for (const LoraModule& m : f.modules) paths.insert(m.path);
    EXPECT_EQ(paths, (std::set<std::string>{"down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q",
                                             "mid_block_attentions_0_proj_in",
                                             "up_blocks_1_attentions_0_transformer_blocks_0_attn2_to_out_0",
                                             "text_model_encoder_layers_1_self_attn_v_proj"}));
    EXPECT_EQ(f.unknown_keys, std::vector<std::string>{"something_else.weight"});
}

// LyCORIS' definitions: LoHa (w1_a @ w1_b) * (w2_a @ w2_b) elementwise, LoKr kron(w1, w2_a @ w2_b); alpha over
// w1_b's rank (LoHa) or w2_b's (LoKr).
TEST(LoraFile, LohaAndLokrByTheirDefinitions) {
    TempDir dir;
    const LoraFile f = read(dir, {{"lora_unet_a.hada_w1_a", counting({6, 2}, 0.5f)}, {"lora_unet_a.hada_w1_b", counting({2, 5}, 1)},
                                  {"lora_unet_a.hada_w2_a", counting({6, 3}, 1)}, {"lora_unet_a.hada_w2_b", counting({3, 5}, 0.25f)},
                                  {"lora_unet_a.alpha", Tensor(Shape{}, {1.0f})},
                                  {"lora_unet_b.lokr_w1", counting({2, 3}, 1)}, {"lora_unet_b.lokr_w2_a", counting({4, 2}, 0.5f)},
                                  {"lora_unet_b.lokr_w2_b", counting({2, 5}, 1)}, {"lora_unet_b.alpha", Tensor(Shape{}, {1.0f})}});
    ASSERT_EQ(f.modules.size(), 2u);
    const LoraModule& loha = f.modules[0].path == "a" ? f.modules[0] : f.modules[1];
    const LoraModule& lokr = f.modules[0].path == "a" ? f.modules[1] : f.modules[0];
    EXPECT_EQ(loha.kind, LoraKind::LoHa);
    EXPECT_EQ(loha.scale, 0.5);
    const Tensor hd = lora_delta(loha);
    auto mm = [](const Tensor& a, const Tensor& b, int64_t i, int64_t j) {
        double s = 0;
        for (int64_t r = 0; r < a.dim(1); ++r) s += double(a.data()[i * a.dim(1) + r]) * b.data()[r * b.dim(1) + j];
        return s;
    };
    for (int64_t i = 0; i < 6; ++i)
        for (int64_t j = 0; j < 5; ++j)
            EXPECT_NEAR(hd.data()[i * 5 + j], mm(counting({6, 2}, 0.5f), counting({2, 5}, 1), i, j) *
                                                  mm(counting({6, 3}, 1), counting({3, 5}, 0.25f), i, j), 1e-5);
    EXPECT_EQ(lokr.kind, LoraKind::LoKr);
    EXPECT_EQ(lokr.scale, 0.5);
    EXPECT_EQ(lokr.out_features, 8);
    EXPECT_EQ(lokr.in_numel, 15);
    const Tensor kd = lora_delta(lokr);
    const Tensor w1 = counting({2, 3}, 1);
    for (int64_t i = 0; i < 2; ++i)
        for (int64_t k = 0; k < 4; ++k)
            for (int64_t j = 0; j < 3; ++j)
                for (int64_t l = 0; l < 5; ++l)
                    EXPECT_NEAR(kd.data()[(i * 4 + k) * 15 + j * 5 + l],
                                w1.data()[i * 3 + j] * mm(counting({4, 2}, 0.5f), counting({2, 5}, 1), k, l), 1e-5);
}

TEST(LoraFile, MalformedFilesAreClearErrors) {
    TempDir dir;
    const std::string m = "lora_unet_x";
    expect_error(dir, {{m + ".lora_down.weight", counting({4, 8}, 1)}, {m + ".lora_up.weight", counting({8, 3}, 1)}},
                 ErrorKind::InvalidModel, "does not fit its down tensor of rank 4");
    expect_error(dir, {{m + ".lora_down.weight", counting({4, 8}, 1)}}, ErrorKind::InvalidModel, "has no 'up' tensor");
    expect_error(dir, {{m + ".alpha", Tensor(Shape{}, {1.0f})}}, ErrorKind::InvalidModel, "has no weights");
    expect_error(dir, {{m + ".lora_down.weight", counting({4, 8, 2}, 1)}, {m + ".lora_up.weight", counting({8, 4}, 1)}},
                 ErrorKind::InvalidModel, "should be 2-d or 4-d");
    expect_error(dir, {{m + ".lora_down.weight", counting({4, 8}, 1)}, {m + ".lora_up.weight", counting({8, 4, 3, 3}, 1)}},
                 ErrorKind::InvalidModel, "[out, rank, 1, 1]");
    expect_error(dir, {{m + ".lora_down.weight", counting({4, 8}, 1)}, {m + ".lora_up.weight", counting({8, 4}, 1)},
                       {m + ".alpha", counting({2}, 1)}},
                 ErrorKind::InvalidModel, "should hold one number");
    Tensor nan = counting({4, 8}, 1);
    nan.data()[5] = NAN;
    expect_error(dir, {{m + ".lora_down.weight", nan}, {m + ".lora_up.weight", counting({8, 4}, 1)}}, ErrorKind::InvalidModel,
                 "NaN or infinite");
    expect_error(dir, {{m + ".lora_down.weight", counting({4, 8}, 1)}, {m + ".lora_up.weight", counting({8, 4}, 1)},
                       {m + ".lora_mid.weight", counting({4, 4, 3, 3}, 1)}},
                 ErrorKind::Unsupported, "Tucker");
    expect_error(dir, {{m + ".oft_blocks", counting({4, 2, 2}, 1)}}, ErrorKind::Unsupported, "OFT");
    expect_error(dir, {{m + ".diff", counting({4, 2}, 1)}}, ErrorKind::Unsupported, "full weight differences");
    expect_error(dir, {{m + ".lora_down.weight", counting({4, 8}, 1)}, {m + ".lora_up.weight", counting({8, 4}, 1)},
                       {m + ".dora_scale", counting({8, 1}, 1)}},
                 ErrorKind::Unsupported, "DoRA");
    expect_error(dir, {{m + ".lora_down.weight", counting({4, 8}, 1)}, {m + ".lora_up.weight", counting({8, 4}, 1)},
                       {m + ".lora_side.weight", counting({8, 4}, 1)}},
                 ErrorKind::InvalidModel, "no part of a LoRA module");
    expect_error(dir, {{"lora_unet_x.lora_down.weight", counting({4, 8}, 1)}, {"lora_unet_x.lora_up.weight", counting({8, 4}, 1)},
                       {"unet.x.lora_A.weight", counting({4, 8}, 1)}, {"unet.x.lora_B.weight", counting({8, 4}, 1)}},
                 ErrorKind::InvalidModel, "twice");
    expect_error(dir, {{"model.diffusion_model.x.weight", counting({4, 8}, 1)}}, ErrorKind::InvalidModel, "holds no LoRA modules");
    // Integer tensors are no weights (written raw: kiln's writer writes floats only).
    const std::string header2 = R"({"lora_unet_x.lora_down.weight":{"dtype":"I32","shape":[1,1],"data_offsets":[0,4]},)"
                               R"("lora_unet_x.lora_up.weight":{"dtype":"F32","shape":[1,1],"data_offsets":[4,8]}})";
    kiln::test::write_bytes(dir.file("int.safetensors"), kiln::test::safetensors_bytes(header2, std::string(8, '\0')));
    try {
        read_lora_file(dir.file("int.safetensors"));
        ADD_FAILURE() << "an I32 LoRA tensor was read";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("has dtype I32"), std::string::npos) << e.what();
    }
}

// Light fuzzing: random byte changes of a small valid file give a LoRA or a kiln::Error, nothing else.
TEST(LoraFile, FuzzedFilesAreReadOrRejected) {
    TempDir dir;
    write_safetensors(dir.file("seed.safetensors"),
                      {{"lora_unet_a.lora_down.weight", counting({2, 4}, 1)}, {"lora_unet_a.lora_up.weight", counting({4, 2}, 1)},
                       {"lora_unet_a.alpha", Tensor(Shape{}, {1.0f})}, {"unet.b.lora_A.weight", counting({2, 4, 3, 3}, 1)},
                       {"unet.b.lora_B.weight", counting({4, 2, 1, 1}, 1)}, {"lora_te_c.hada_w1_a", counting({3, 2}, 1)},
                       {"lora_te_c.hada_w1_b", counting({2, 3}, 1)}, {"lora_te_c.hada_w2_a", counting({3, 2}, 1)},
                       {"lora_te_c.hada_w2_b", counting({2, 3}, 1)}},
                      DType::F16);
    std::ifstream in(dir.file("seed.safetensors"), std::ios::binary);
    const std::string seed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::mt19937 rng(5);
    int valid = 0, rejected = 0;
    for (int round = 0; round < 400; ++round) {
        std::string bytes = seed;
        const int edits = 1 + int(rng() % 4);
        for (int e = 0; e < edits; ++e) {
            const size_t at = rng() % bytes.size();
            switch (rng() % 3) {
                case 0: bytes[at] = char(rng()); break;                 // a changed byte
                case 1: bytes.resize(at); break;                         // truncated
                default: bytes[at] = "0123456789,:[]{}\"._"[rng() % 19];  // syntax
            }
            if (bytes.empty()) bytes = "x";
        }
        const std::string path = dir.file("f" + std::to_string(round) + ".safetensors");
        kiln::test::write_bytes(path, bytes);
        const auto outcome = kiln::test::fuzz_outcome(path, [&] {
            const LoraFile f = read_lora_file(path);
            for (const LoraModule& m : f.modules) {
                const Tensor d = lora_delta(m);
                EXPECT_EQ(d.numel(), m.out_features * m.in_numel);
            }
        });
        (outcome == kiln::test::Outcome::Valid ? valid : rejected)++;
        std::filesystem::remove(path);
    }
    EXPECT_GT(valid, 0);  // some changes only touch values
    EXPECT_GT(rejected, 0);
}
