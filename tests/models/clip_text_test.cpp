// CLIP text encoder conformance with transformers' CLIPTextModel / CLIPTextModelWithProjection
// (tests/data/<model>/modules.safetensors), loading the weights from both file layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "common/fixtures.h"
#include "io/safetensors.h"
#include "kiln/error.h"
#include "models/clip/clip_single_file.h"
#include "models/clip/clip_text_model.h"
#include "ops/ops.h"

using namespace kiln;
using kiln::test::data_path;
using kiln::test::relative_error;

namespace {

// The references are float32 CPU evaluations of the same fp16 weights, so only the order of float32
// sums differs: unit roundoff 6e-8, growing with the sqrt of the dot-product length (<= 96 here) and
// through 3 layers and their norms. The observed error is at most 3e-7 of the tensor's largest
// magnitude; 2e-6 leaves ~7x for other BLAS kernels and CPUs. It has to be that tight: the subtlest
// mistake, a layer-norm eps of 1e-6 instead of 1e-5, measured 4.6e-6 to 1.1e-5; grosser ones (a wrong
// or transposed tensor, head count, activation or mask) show far larger.
constexpr double kTolerance = 2e-6;

struct Encoder {
    std::string model;
    std::string key;        // "text1" / "text2" in modules.safetensors
    std::string folder;     // diffusers subfolder
    std::string prefix;     // single-file prefix
    bool openclip;          // single-file layout
};

std::vector<Encoder> encoders() {
    return {{"sd15-mini", "text1", "text_encoder", kSd1ClipPrefix, false},
            {"sd2-mini", "text1", "text_encoder", kSd2OpenClipPrefix, true},
            {"sdxl-mini", "text1", "text_encoder", kSdxlClipPrefix, false},
            {"sdxl-mini", "text2", "text_encoder_2", kSdxlOpenClipPrefix, true}};
}

std::shared_ptr<const SafetensorsFile> open_shared(const std::string& path) {
    return std::make_shared<const SafetensorsFile>(SafetensorsFile::open(path));
}

ClipTextModel load_diffusers(const Encoder& e) {
    const std::string dir = data_path(e.model + "/diffusers/" + e.folder + "/");
    FileSource source(open_shared(dir + "model.safetensors"));
    return ClipTextModel::load(source, load_clip_text_config(dir + "config.json"));
}

ClipTextModel load_single_file(const Encoder& e) {
    auto file = open_shared(data_path(e.model + "/" + e.model + ".safetensors"));
    ClipSingleFile layout = e.openclip ? openclip_layout(*file, e.prefix) : clip_hf_layout(*file, e.prefix);
    MappedSource source(file, layout.table, "text encoder");
    return ClipTextModel::load(source, layout.config);
}

std::vector<std::vector<int>> prompt_ids(const SafetensorsFile& ref, const std::string& key) {
    Tensor ids = ref.load(key + ".input_ids");
    std::vector<std::vector<int>> rows(ids.dim(0));
    for (int64_t b = 0; b < ids.dim(0); ++b)
        for (int64_t t = 0; t < ids.dim(1); ++t) rows[b].push_back(static_cast<int>(ids[b * ids.dim(1) + t]));
    return rows;
}

void check_against_reference(const ClipTextModel& model, const Encoder& e, const std::string& layout) {
    SafetensorsFile ref = SafetensorsFile::open(data_path(e.model + "/modules.safetensors"));
    const ClipTextOutput out = model.encode(prompt_ids(ref, e.key));
    const double last = relative_error(out.last_hidden_state, ref.load(e.key + ".last_hidden_state"));
    const double pen = relative_error(out.penultimate, ref.load(e.key + ".penultimate_hidden_state"));
    EXPECT_LT(last, kTolerance) << e.model << " " << e.key << " " << layout;
    EXPECT_LT(pen, kTolerance) << e.model << " " << e.key << " " << layout;
    std::printf("[ measure  ] %s %s (%s): last_hidden_state %.2e, penultimate %.2e", e.model.c_str(),
                e.key.c_str(), layout.c_str(), last, pen);
    if (ref.has(e.key + ".text_embeds")) {
        const double pooled = relative_error(out.pooled, ref.load(e.key + ".text_embeds"));
        EXPECT_LT(pooled, kTolerance) << e.model << " " << e.key << " " << layout;
        std::printf(", text_embeds %.2e", pooled);
    }
    std::printf("\n");
}

}  // namespace

TEST(ClipText, MatchesTransformersFromDiffusersFolders) {
    for (const Encoder& e : encoders()) check_against_reference(load_diffusers(e), e, "diffusers folder");
}

TEST(ClipText, MatchesTransformersFromSingleFiles) {
    for (const Encoder& e : encoders()) check_against_reference(load_single_file(e), e, "single file");
}

TEST(ClipText, PooledIsTheProjectedFinalStateAtTheEosToken) {
    // SDXL's second encoder: pooled = text_projection(last_hidden_state[b, argmax(ids[b])]), checked
    // here against the reference last_hidden_state and the projection weight, independently of encode.
    const Encoder e = encoders()[3];
    SafetensorsFile ref = SafetensorsFile::open(data_path(e.model + "/modules.safetensors"));
    SafetensorsFile weights = SafetensorsFile::open(data_path(e.model + "/diffusers/text_encoder_2/model.safetensors"));
    const Tensor last = ref.load("text2.last_hidden_state"), proj = weights.load("text_projection.weight");
    const auto ids = prompt_ids(ref, "text2");
    const int64_t len = last.dim(1), h = last.dim(2);
    Tensor eos_rows({static_cast<int64_t>(ids.size()), h});
    for (size_t b = 0; b < ids.size(); ++b) {
        const int64_t eos = std::max_element(ids[b].begin(), ids[b].end()) - ids[b].begin();
        EXPECT_EQ(ids[b][eos], 49407);  // <|endoftext|>, the largest id of the CLIP vocabulary
        for (int64_t c = 0; c < h; ++c) eos_rows[b * h + c] = last[(b * len + eos) * h + c];
    }
    EXPECT_LT(relative_error(ops::linear(eos_rows, proj, nullptr), ref.load("text2.text_embeds")), kTolerance);
}

TEST(ClipText, ClipSkipTwoIsTheFinalNormOfThePenultimateState) {
    // diffusers' StableDiffusionPipeline with clip_skip=1 ("clip skip 2" in the WebUI's numbering) takes
    // hidden_states[-2] through final_layer_norm; the reference penultimate state goes through the
    // model's own final_layer_norm here, so the expectation comes from the fixture.
    const Encoder e = encoders()[0];
    SafetensorsFile ref = SafetensorsFile::open(data_path(e.model + "/modules.safetensors"));
    SafetensorsFile weights = SafetensorsFile::open(data_path(e.model + "/diffusers/text_encoder/model.safetensors"));
    const ClipTextModel model = load_diffusers(e);
    const ClipTextOutput out = model.encode(prompt_ids(ref, e.key), 2);
    const Tensor expected = ops::layer_norm(ref.load("text1.penultimate_hidden_state"),
                                            weights.load("text_model.final_layer_norm.weight"),
                                            weights.load("text_model.final_layer_norm.bias"), model.config().eps);
    EXPECT_LT(relative_error(out.last_hidden_state, expected), kTolerance);
    // The pooled output always comes from the full model.
    EXPECT_EQ(out.pooled.values(), model.encode(prompt_ids(ref, e.key), 1).pooled.values());
}

TEST(ClipText, BatchRowsAreIndependent) {
    const Encoder e = encoders()[1];
    SafetensorsFile ref = SafetensorsFile::open(data_path(e.model + "/modules.safetensors"));
    const ClipTextModel model = load_diffusers(e);
    const auto ids = prompt_ids(ref, e.key);
    const ClipTextOutput batch = model.encode(ids);
    ASSERT_EQ(batch.last_hidden_state.shape(), (Shape{int64_t(ids.size()), 77, 48}));
    const int64_t row = 77 * 48;
    for (size_t r = 0; r < ids.size(); ++r) {
        const ClipTextOutput one = model.encode(ids[r]);
        ASSERT_EQ(one.last_hidden_state.shape(), (Shape{1, 77, 48}));
        const float* in_batch = batch.last_hidden_state.data() + int64_t(r) * row;
        const Tensor slice({1, 77, 48}, std::vector<float>(in_batch, in_batch + row));
        // Not bitwise: BLAS blocks a product differently for another row count, so sums run in another order.
        EXPECT_LT(relative_error(slice, one.last_hidden_state), kTolerance) << "row " << r << " of " << ids.size();
    }
}

TEST(ClipText, BadArgumentsAreInvalidArgument) {
    const ClipTextModel model = load_diffusers(encoders()[0]);
    std::vector<int> ids(77, 49407);
    ids[0] = 49406;
    auto expect_invalid = [&](auto&& call, const std::string& fragment) {
        try {
            call();
            ADD_FAILURE() << "no error for " << fragment;
        } catch (const Error& err) {
            EXPECT_EQ(err.kind(), ErrorKind::InvalidArgument);
            EXPECT_NE(std::string(err.what()).find(fragment), std::string::npos) << err.what();
        }
    };
    expect_invalid([&] { model.encode(ids, 0); }, "clip skip 0");
    expect_invalid([&] { model.encode(ids, 4); }, "clip skip 4");
    std::vector<int> bad = ids;
    bad[5] = 49408;
    expect_invalid([&] { model.encode(bad); }, "token id 49408");
    bad[5] = -1;
    expect_invalid([&] { model.encode(bad); }, "token id -1");
    expect_invalid([&] { model.encode(std::vector<int>(78, 1)); }, "78 tokens");
    expect_invalid([&] { model.encode(std::vector<std::vector<int>>{}); }, "no token rows");
    expect_invalid([&] { model.encode(std::vector<std::vector<int>>{ids, std::vector<int>(76, 1)}); }, "differ");
}
