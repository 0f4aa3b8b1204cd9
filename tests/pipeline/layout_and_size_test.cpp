// Whole runs on calls the fixtures never make (non-square sizes, 7 and 9 steps, guidance 6, no
// negative prompt, img2img at strength 0.35), checked by properties that need no new reference:
// a folder and a single file of the same weights give the same latents bit for bit whenever their
// resolved scheduler configs are the same, and width and height land where diffusers puts them.
#include <gtest/gtest.h>

#include <cmath>

#include <algorithm>

#include "common/fixtures.h"
#include "image/png.h"
#include "kiln/error.h"
#include "pipeline/conditioning.h"
#include "pipeline/generate.h"
#include "sampling/scheduler_config.h"

using namespace kiln;
using kiln::test::data_path;

namespace {

const char* const kModelNames[] = {"sd15-mini", "sd2-mini", "sdxl-mini"};
// One of each kind: alpha-based with leading default (DDIM, PNDM, LCM), sigma-based with linspace
// default (Euler, Euler a with its step noise), multistep (UniPC). Every sampler's config resolution
// is covered key by key in tests/sampling.
const char* const kSamplers[] = {"ddim", "pndm", "euler", "euler_a", "unipc", "lcm"};

StableDiffusionModel load(const std::string& model, bool single_file) {
    LoadOptions options;
    if (single_file && model == "sd2-mini") options.prediction = "v_prediction";  // the folder's prediction type
    return load_model(data_path(model + (single_file ? "/" + model + ".safetensors" : "/diffusers")), options);
}

GenerationRequest odd_call(const std::string& sampler) {
    GenerationRequest r;
    r.prompt = "a small blue square on the left";
    r.width = 64;
    r.height = 96;
    r.steps = 7;  // does not divide 1000
    r.cfg_scale = 6.0f;
    r.seed = 1234;
    r.sampler = sampler;
    return r;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) { return a.shape() == b.shape() && a.values() == b.values(); }

// The scheduler config keys on which the two layouts' resolved configs differ.
std::vector<std::string> differing_keys(const SchedulerConfig& a, const SchedulerConfig& b) {
    std::vector<std::string> keys;
    for (const auto& [k, v] : a.values.items())
        if (!b.values.contains(k) || b.values.at(k) != v) keys.push_back(k);
    return keys;
}

}  // namespace

// The layouts share weights (fp16 values converted once), so the only thing that may set their
// images apart is the scheduler config: a diffusers folder carries its own scheduler_config.json,
// a single file gets the original model's (reference_schedulers.cpp). diffusers' from_config uses
// every key a config holds, so a folder saved by a recent diffusers, which writes
// "timestep_spacing": "leading" explicitly, gives Euler-type samplers leading spacing where the
// original config (no such key) gives them their class default, linspace. That key must be the
// only difference, and with it aligned the latents must be identical.
TEST(LayoutConsistency, FolderAndSingleFileDifferOnlyByTheirSchedulerConfig) {
    for (const char* model : kModelNames) {
        const StableDiffusionModel folder = load(model, false);
        const StableDiffusionModel single = load(model, true);
        for (const char* sampler : kSamplers) {
            const std::string where = std::string(model) + "/" + sampler;
            const SchedulerConfig cf = scheduler_config_for(sampler, folder.scheduler_config);
            const SchedulerConfig cs = scheduler_config_for(sampler, single.scheduler_config);
            const std::vector<std::string> diff = differing_keys(cf, cs);
            EXPECT_TRUE(diff.empty() || diff == std::vector<std::string>{"timestep_spacing"})
                << where << ": configs differ in " << testing::PrintToString(diff);
            GenerationRequest r = odd_call(sampler);
            if (!diff.empty()) r.timestep_spacing = cf.timestep_spacing;
            const GenerationResult a = generate(folder, r);
            const GenerationResult b = generate(single, r);
            EXPECT_TRUE(bitwise_equal(a.final_latent, b.final_latent)) << where;
            EXPECT_TRUE(bitwise_equal(a.image, b.image)) << where;
        }
    }
}

TEST(LayoutConsistency, Img2ImgFolderAndSingleFileAgreeWithTheSameSchedulerConfig) {
    for (const char* model : kModelNames) {
        const StableDiffusionModel folder = load(model, false);
        const StableDiffusionModel single = load(model, true);
        Tensor init({1, 3, 96, 64});
        for (int64_t i = 0; i < init.numel(); ++i) init[i] = static_cast<float>((i * 37) % 256) / 255.0f;
        for (const char* sampler : {"ddim", "euler_a", "heun"}) {
            GenerationRequest r = odd_call(sampler);
            r.steps = 9;
            r.strength = 0.35;
            r.init_image = &init;
            r.negative_prompt = "blurry";
            r.timestep_spacing = scheduler_config_for(sampler, folder.scheduler_config).timestep_spacing;
            EXPECT_TRUE(bitwise_equal(generate(folder, r).final_latent, generate(single, r).final_latent))
                << model << "/" << sampler;
        }
    }
}

// diffusers' prepare_latents draws (batch, 4, height // 8, width // 8); the decoded image is
// (batch, 3, height, width) and a PNG of it is `width` pixels wide.
TEST(NonSquareSizes, LatentsAndImageFollowHeightThenWidth) {
    for (const char* model : kModelNames) {
        const StableDiffusionModel m = load(model, false);
        for (auto [w, h] : {std::pair{64, 96}, std::pair{96, 64}}) {
            GenerationRequest r = odd_call("euler");
            r.width = w;
            r.height = h;
            const GenerationResult res = generate(m, r);
            EXPECT_EQ(res.final_latent.shape(), (Shape{1, 4, h / 8, w / 8})) << model;
            EXPECT_EQ(res.image.shape(), (Shape{1, 3, h, w})) << model;
            const Image png = image_from_tensor(res.image);
            EXPECT_EQ(png.width, w) << model;
            EXPECT_EQ(png.height, h) << model;
        }
    }
}

// StableDiffusionXLPipeline._get_add_time_ids: list(original_size + crops_coords_top_left +
// target_size) with original_size = target_size = (height, width) and crops (0, 0) by default, the
// same for the negative row.
TEST(NonSquareSizes, SdxlTimeIdsAreHeightWidthPairs) {
    const StableDiffusionModel m = load("sdxl-mini", false);
    const int width = 64, height = 96;
    const Conditioning c = encode_conditioning(m, "a cat", std::nullopt, true, 1, width, height);
    ASSERT_EQ(c.time_ids.shape(), (Shape{2, 6}));
    const std::vector<float> row = {float(height), float(width), 0, 0, float(height), float(width)};
    for (int b = 0; b < 2; ++b)
        for (int j = 0; j < 6; ++j) EXPECT_EQ(c.time_ids[b * 6 + j], row[static_cast<size_t>(j)]) << b << "," << j;
}

// StableDiffusionPipeline.__call__ decodes `latents / self.vae.config.scaling_factor`: a float32
// division, which rounds differently from a multiplication by the rounded reciprocal in about one
// element in five. The image must be exactly the decode of the final latents so divided, mapped by
// (x / 2 + 0.5).clamp(0, 1) (VaeImageProcessor.denormalize).
TEST(Decode, ImageIsTheDecodeOfTheLatentsDividedByTheScalingFactor) {
    for (const char* model : kModelNames) {
        const StableDiffusionModel m = load(model, false);
        GenerationRequest r = odd_call("euler");
        r.steps = 2;
        const GenerationResult res = generate(m, r);
        Tensor latents = res.final_latent;
        for (int64_t i = 0; i < latents.numel(); ++i) latents[i] = latents[i] / m.vae_scale;
        Tensor image = m.vae->decode(latents);
        for (int64_t i = 0; i < image.numel(); ++i) image[i] = std::clamp(image[i] / 2.0f + 0.5f, 0.0f, 1.0f);
        EXPECT_TRUE(bitwise_equal(res.image, image)) << model;
    }
}

// txt2img loads without the VAE encoder (LoadOptions::vae_encoder = false, as `kiln txt2img` does): the
// same image bit for bit, and img2img on such a model is refused before any work with a clear error.
TEST(DecoderOnlyVae, Txt2imgIsUnchangedAndImg2imgIsRefused) {
    LoadOptions without;
    without.vae_encoder = false;
    const StableDiffusionModel full = load("sd15-mini", false);
    const StableDiffusionModel lean = load_model(data_path("sd15-mini/diffusers"), without);
    EXPECT_TRUE(full.vae->has_encoder());
    EXPECT_FALSE(lean.vae->has_encoder());
    GenerationRequest r = odd_call("euler");
    r.steps = 2;
    const GenerationResult a = generate(full, r), b = generate(lean, r);
    EXPECT_TRUE(bitwise_equal(a.final_latent, b.final_latent));
    EXPECT_TRUE(bitwise_equal(a.image, b.image));

    Tensor init({1, 3, 96, 64});
    r.init_image = &init;
    try {
        generate(lean, r);
        ADD_FAILURE() << "img2img ran without the VAE encoder";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
        EXPECT_NE(std::string(e.what()).find("VAE encoder"), std::string::npos) << e.what();
    }
}

// Non-finite values never pass as a picture: a NaN in the init image is refused before any work, naming it.
TEST(NonFinite, AnInitImageWithANaNIsAClearError) {
    const StableDiffusionModel m = load("sd15-mini", false);
    GenerationRequest r = odd_call("euler");
    r.steps = 2;
    Tensor init = Tensor::filled({1, 3, 96, 64}, 0.5f);
    init[1234] = std::nanf("");
    r.init_image = &init;
    try {
        generate(m, r);
        ADD_FAILURE() << "an init image with a NaN was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
        EXPECT_NE(std::string(e.what()).find("init image contains NaN"), std::string::npos) << e.what();
    }
}
