// Stored calls of the conformance sweep (scripts/conformance-sweep, docs/CONFORMANCE.md): its worst calls and
// every call that ever failed, each run through generate() and compared with diffusers' float32 latents.
// tests/data/conformance (packed in conformance.tar.xz) holds the calls as the sweep drew them (calls.json) and
// diffusers' final latents (latents.safetensors) (the images are not stored: the tree must stay small, and the VAE decode is checked on its
// own against diffusers in tests/models).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "common/fixtures.h"
#include "image/png.h"
#include "io/safetensors.h"
#include "pipeline/generate.h"
#include "sampling/sampler_names.h"

using namespace kiln;

namespace {

// tests/data/conformance/conformance.tar.xz, unpacked by the build.
const std::string kDir = std::string(KILN_CONFORMANCE_DATA) + "/";

nlohmann::json stored_calls() {
    std::ifstream f(kDir + "calls.json");
    if (!f) return nlohmann::json::array();
    return nlohmann::json::parse(f);
}

std::vector<std::string> call_ids() {
    std::vector<std::string> ids;
    for (const auto& c : stored_calls()) ids.push_back(c.at("id"));
    return ids;
}

// The sweep's bound (scripts/conformance-sweep, latent_bound): a UNet call agrees with diffusers to 3.2e-6 of
// its output's scale (tests/models), guidance g makes the guided output's error up to (1 + 2g) times that,
// and the sampler adds each call's error into the latents, at most two calls a step (Heun, second-order
// updates); errors of successive calls add at worst.
double latent_bound(const nlohmann::json& c) {
    const double g = c.at("guidance").get<double>() > 1 ? c.at("guidance").get<double>() : 0.0;
    return 2.0 * c.at("steps").get<int>() * (1 + 2 * g) * 3.2e-6;
}

class SweepRegression : public testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(SweepRegression, FinalLatentsMatchDiffusers) {
    nlohmann::json call;
    for (const auto& c : stored_calls())
        if (c.at("id") == GetParam()) call = c;
    ASSERT_FALSE(call.is_null());
    const std::string model_name = call.at("model");
    const bool single = call.at("layout") == "single";
    LoadOptions options;
    if (single && model_name == "sd2-mini") options.prediction = "v_prediction";
    options.vae_encoder = call.contains("init_image");
    const StableDiffusionModel model = load_model(
        test::data_path(model_name + (single ? "/" + model_name + ".safetensors" : "/diffusers")), options);

    GenerationRequest req;
    // diffusers reads the prompt as plain text (the sweep's prompts hold "(castle:1.3)" and run past 77 tokens).
    req.prompt_syntax = PromptSyntax::Plain;
    req.prompt = call.at("prompt");
    if (!call.at("negative_prompt").is_null()) req.negative_prompt = call.at("negative_prompt").get<std::string>();
    req.width = call.at("width");
    req.height = call.at("height");
    req.steps = call.at("steps");
    req.cfg_scale = call.at("guidance").get<float>();
    req.sampler = parse_sampler(call.at("sampler"));
    if (!call.at("timestep_spacing").is_null()) req.timestep_spacing = call.at("timestep_spacing").get<std::string>();
    req.seed = call.at("seed");
    req.clip_skip = call.at("clip_skip");
    req.batch_size = call.at("batch_size");
    Tensor init;
    if (call.contains("init_image")) {
        init = tensor_from_image(read_png(kDir + call.at("init_image").get<std::string>()));
        req.init_image = &init;
        req.strength = call.at("strength").get<double>();
    }
    const GenerationResult result = generate(model, req);
    const Tensor expected = SafetensorsFile::open(kDir + "latents.safetensors").load(GetParam() + ".final_latent");
    const double err = test::relative_error(result.final_latent, expected);
    EXPECT_LE(err, latent_bound(call)) << GetParam();
    std::printf("[ sweep ] %s latents %.2e (bound %.2e)\n", GetParam().c_str(), err, latent_bound(call));
}

INSTANTIATE_TEST_SUITE_P(Stored, SweepRegression, testing::ValuesIn(call_ids()),
                         [](const testing::TestParamInfo<std::string>& info) {
                             std::string name = "call_" + info.param;
                             for (char& ch : name)
                                 if (ch == '-') ch = '_';
                             return name;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(SweepRegression);

// The stored set is what CI checks of the sweep; losing it must fail, not skip.
TEST(SweepRegressionSet, IsThere) { EXPECT_GE(call_ids().size(), 30u) << kDir + "calls.json"; }
