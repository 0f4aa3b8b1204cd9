// Whole txt2img and img2img runs against diffusers' pipelines (tests/data/<model>/pipeline.* and
// img2img.*): every sampler, all three model families, both file layouts.
#include <gtest/gtest.h>

#include <fstream>

#include "common/fixtures.h"
#include "io/safetensors.h"
#include "pipeline/generate.h"
#include "pipeline/vae_tiling.h"
#include "sampling/scheduler_config.h"

using namespace kiln;
using kiln::test::data_path;

namespace {

struct ModelCase {
    std::string model;
    bool single_file;
};

std::string case_name(const testing::TestParamInfo<ModelCase>& info) {
    std::string name = info.param.model + (info.param.single_file ? "_single_file" : "_diffusers");
    for (char& c : name) if (c == '-') c = '_';
    return name;
}

StableDiffusionModel load_case(const ModelCase& c) {
    LoadOptions options;
    // Single SD 2.x files cannot say what they predict; the fixture's sd2-mini predicts velocity.
    if (c.single_file && c.model == "sd2-mini") options.prediction = "v_prediction";
    return load_model(data_path(c.model + (c.single_file ? "/" + c.model + ".safetensors" : "/diffusers")), options);
}

// Tolerances. One UNet call agrees with diffusers to ~1e-6 of its output's scale (float32 rounding
// in another summation order); the samplers feed each step's rounding into the next and guidance
// at 7.5 amplifies the difference of two UNet outputs, so after 6-16 model calls the latents agree
// to 1e-6..4.2e-6 of their scale (observed). 3e-5 leaves room for other BLAS kernels; a wrong
// sigma, timestep or noise draw shows as 1e-2 or more. The image is stored in fp16 by the fixture:
// values in [0.5, 1] are rounded by up to 2^-12 = 2.44e-4, plus the VAE's ~5e-6 of float32 error.
constexpr double kLatentTolerance = 3e-5;
constexpr double kImageTolerance = 3e-4;

void check_run(const StableDiffusionModel& model, GenerationRequest req, const SafetensorsFile& ref,
               const std::string& key, const std::string& what) {
    GenerationResult result = generate(model, req);
    const double latent_err = kiln::test::relative_error(result.final_latent, ref.load(key + ".final_latent"));
    const double image_err = kiln::test::relative_error(result.image, ref.load(key + ".image"));
    EXPECT_LT(latent_err, kLatentTolerance) << what << " " << key;
    EXPECT_LT(image_err, kImageTolerance) << what << " " << key;
    std::printf("[ pipeline ] %-40s %-16s latent %.2e image %.2e\n", what.c_str(), key.c_str(), latent_err,
                image_err);
}

// pipeline.json holds -Infinity (diffusers' lambda_min_clipped), which plain JSON does not.
nlohmann::json read_fixture_json(const std::string& path) {
    std::ifstream f(path);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    return parse_scheduler_config_text(text, path);
}

// The call diffusers was given, as the fixture records it.
GenerationRequest request_from_call(const nlohmann::json& call) {
    GenerationRequest req;
    req.prompt = call.at("prompt");
    req.negative_prompt = call.at("negative_prompt").get<std::string>();
    req.width = call.at("width");
    req.height = call.at("height");
    req.steps = call.at("steps");
    req.cfg_scale = call.at("guidance_scale").get<float>();
    req.seed = call.at("seed");
    req.rng = call.at("generator");
    if (call.contains("strength")) req.strength = call.at("strength");
    return req;
}

class PipelineConformance : public testing::TestWithParam<ModelCase> {};

}  // namespace

TEST_P(PipelineConformance, Txt2ImgEverySampler) {
    const ModelCase& c = GetParam();
    StableDiffusionModel model = load_case(c);
    const nlohmann::json meta = read_fixture_json(data_path(c.model + "/pipeline.json"));
    SafetensorsFile ref = SafetensorsFile::open(data_path(c.model + "/pipeline.safetensors"));
    int checked = 0;
    for (const auto& [key, entry] : meta.items()) {
        if (key.front() == '_') continue;
        GenerationRequest req = request_from_call(meta.at("_call"));
        req.sampler = key == "euler_trailing" ? "euler" : key;
        // The txt2img fixtures come from a pipeline built in memory, whose scheduler config marks
        // timestep_spacing as a default (so Euler-family samplers take "linspace"); a pipeline loaded
        // from the saved folder has it set explicitly ("leading"). Give the spacing diffusers used.
        req.timestep_spacing = entry.at("config").at("timestep_spacing").get<std::string>();
        check_run(model, req, ref, key, c.model + (c.single_file ? " single file" : " diffusers") + " txt2img");
        ++checked;
    }
    EXPECT_EQ(checked, 11);
}

namespace {

// A model's img2img fixture: its calls (one per sampler), their outputs and the init image.
struct Img2ImgFixture {
    explicit Img2ImgFixture(const std::string& model)
        : meta(read_fixture_json(data_path(model + "/img2img.json"))),
          ref(SafetensorsFile::open(data_path(model + "/img2img.safetensors"))),
          init(ref.load("init_image")),
          // These fixtures come from the pipeline loaded from the diffusers folder, whose scheduler config
          // sets timestep_spacing explicitly; a single file has none, so give it the same.
          spacing(read_fixture_json(data_path(model + "/diffusers/scheduler/scheduler_config.json"))
                      .at("timestep_spacing")) {}

    // The samplers the fixture ran (its keys that do not start with '_').
    std::vector<std::string> samplers() const {
        std::vector<std::string> out;
        for (const auto& [key, entry] : meta.items())
            if (key.front() != '_') out.push_back(key);
        return out;
    }
    GenerationRequest request(const std::string& sampler) const {
        GenerationRequest req = request_from_call(meta.at("_call"));
        req.sampler = sampler;
        req.timestep_spacing = spacing;
        req.init_image = &init;
        return req;
    }

    nlohmann::json meta;
    SafetensorsFile ref;
    Tensor init;
    std::string spacing;
};

}  // namespace

TEST_P(PipelineConformance, Img2ImgEverySampler) {
    const ModelCase& c = GetParam();
    StableDiffusionModel model = load_case(c);
    const Img2ImgFixture f(c.model);
    for (const std::string& key : f.samplers())
        check_run(model, f.request(key), f.ref, key, c.model + (c.single_file ? " single file" : " diffusers") + " img2img");
    EXPECT_EQ(f.samplers().size(), 5u);
}

// --vae-tiling on: the init image's encode and the decode go through the banded passes (at these sizes one band
// each: tests/models/vae_tiled_*_test.cpp cut them finer), within the same bound against diffusers.
TEST_P(PipelineConformance, Img2ImgWithTheVaeInBands) {
    const ModelCase& c = GetParam();
    StableDiffusionModel model = load_case(c);
    const Img2ImgFixture f(c.model);
    ASSERT_FALSE(f.samplers().empty()) << "no img2img call in the fixture";
    const std::string key = f.samplers().front();  // one sampler: the encode does not depend on it
    GenerationRequest req = f.request(key);
    req.vae_tiling = VaeTiling::On;
    check_run(model, req, f.ref, key, c.model + (c.single_file ? " single file" : " diffusers") + " img2img, VAE in bands");
}

INSTANTIATE_TEST_SUITE_P(AllModels, PipelineConformance,
                         testing::Values(ModelCase{"sd15-mini", false}, ModelCase{"sd15-mini", true},
                                         ModelCase{"sd2-mini", false}, ModelCase{"sd2-mini", true},
                                         ModelCase{"sdxl-mini", false}, ModelCase{"sdxl-mini", true}),
                         case_name);
