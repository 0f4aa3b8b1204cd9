// AUTOMATIC1111's AND (composable diffusion) in generation, against make_and_guidance.py's oracle
// (tools/prompt-syntax/scripts.tar.xz; tests/data/prompt-syntax/a1111_and_emphasis.tar.xz): the combination
// against the webui's combine_denoised arithmetic in torch, value for value; whole generations against
// diffusers' pipelines whose UNet call does what the webui's denoiser does with the parts; the parts' padding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/fixtures.h"
#include "io/safetensors.h"
#include "kiln/error.h"
#include "pipeline/composable_guidance.h"
#include "pipeline/conditioning.h"
#include "pipeline/generate.h"
#include "rng/torch_cpu_generator.h"
#include "sampling/sampler_names.h"
#include "text/composable_prompt.h"

using namespace kiln;

namespace {

const std::string kOracleDir = KILN_PROMPT_AND_DATA;

const nlohmann::json& oracle() {
    static const nlohmann::json j = test::read_json(kOracleDir + "/and_guidance.json");
    return j;
}

Shape shape_of(const nlohmann::json& batch_and_rest, int64_t lead) {
    Shape s{lead};
    for (const auto& d : batch_and_rest) s.push_back(d.get<int64_t>());
    return s;
}

}  // namespace

// Every value the same float as torch's: the same operations in the same order (subtract, multiply by the
// rounded factor, add), each rounded once in float32.
TEST(ComposableGuidance, CombinesAsTheWebui) {
    const nlohmann::json& cases = oracle().at("combine");
    ASSERT_EQ(cases.size(), 4u);
    for (const nlohmann::json& c : cases) {
        const int64_t batch = c.at("batch");
        const std::vector<double> weights = c.at("weights");
        const Tensor negative = TorchCpuGenerator(c.at("seed")).randn(shape_of(c.at("shape"), batch));
        const Tensor parts =
            TorchCpuGenerator(c.at("seed").get<uint64_t>() + 100).randn(shape_of(c.at("shape"), batch * weights.size()));
        const Tensor out =
            combine_composable_guidance(concat_batch(negative, parts), batch, weights, c.at("scale").get<double>());
        const std::vector<float> want = c.at("out");
        ASSERT_EQ(out.numel(), static_cast<int64_t>(want.size()));
        int differ = 0;
        for (int64_t i = 0; i < out.numel(); ++i) differ += out[i] != want[static_cast<size_t>(i)];
        EXPECT_EQ(differ, 0) << "seed " << c.at("seed");
    }
}

TEST(ComposableGuidance, RejectsRowsThatDoNotFit) {
    EXPECT_THROW(combine_composable_guidance(Tensor(Shape{5, 4, 2, 2}), 2, {1.0, 0.5}, 7.0), Error);
    EXPECT_THROW(combine_composable_guidance(Tensor(Shape{2, 4, 2, 2}), 1, {}, 7.0), Error);
    EXPECT_EQ(repeat_batch(Tensor(Shape{2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6}), 3).values(),
              (std::vector<float>{1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6}));
}

class ComposableGeneration : public testing::TestWithParam<std::string> {};

TEST_P(ComposableGeneration, MatchesTheWebuisDenoiserOnDiffusers) {
    nlohmann::json c;
    for (const nlohmann::json& x : oracle().at("generations"))
        if (x.at("id") == GetParam()) c = x;
    ASSERT_FALSE(c.is_null());
    const StableDiffusionModel model = load_model(test::data_path(c.at("model").get<std::string>() + "/diffusers"));
    GenerationRequest req;
    req.prompt = c.at("prompt");
    if (!c.at("negative_prompt").is_null()) req.negative_prompt = c.at("negative_prompt").get<std::string>();
    req.width = req.height = 64;
    req.steps = c.at("steps");
    req.cfg_scale = c.at("guidance").get<float>();
    req.sampler = parse_sampler(c.at("sampler"));
    req.seed = c.at("seed");
    req.batch_size = c.at("batch_size");
    const Tensor expected = SafetensorsFile::open(kOracleDir + "/and_latents.safetensors").load(GetParam());
    const GenerationResult result = generate(model, req);

    // The sweep's bound (tests/pipeline/sweep_regression_test.cpp): 3.2e-6 of scale per UNet output, times
    // (1 + 2 g sum |w|) through the combination (each part's error scaled by its factor, the negative's by
    // |1 - sum of factors|), two calls a step at most.
    double weights = 0;
    for (const ComposablePart& p : split_composable_prompt(req.prompt)) weights += std::fabs(p.weight);
    const double g = c.at("guidance").get<double>();
    const double bound = 2.0 * req.steps * (1 + 2 * g * weights) * 3.2e-6;
    const double err = test::relative_error(result.final_latent, expected);
    EXPECT_LE(err, bound);
    std::printf("[ and ] %s latents %.2e (bound %.2e)\n", GetParam().c_str(), err, bound);

    // The comparison can fail: the same call read as one plain prompt (AND as a word) is another picture.
    req.prompt_syntax = PromptSyntax::Plain;
    EXPECT_GT(test::relative_error(generate(model, req).final_latent, expected), 10 * bound);
}

INSTANTIATE_TEST_SUITE_P(Cases, ComposableGeneration,
                         testing::Values("sd15", "sd15_three", "sdxl", "sd15_weight_no_cfg"));

// Parts of different lengths: the shorter padded with copies of its last token's row (stack_conds); a negative
// of another length runs apart.
TEST(ComposableConditioning, PadsPartsToTheLongest) {
    const StableDiffusionModel model = load_model(test::data_path("sd15-mini/diffusers"));
    std::string long_part;
    for (int i = 0; i < 40; ++i) long_part += "red cat ";
    PromptEncodingOptions options;
    const ConditioningSchedule s =
        encode_conditioning_schedule(model, "a dog AND " + long_part + ":0.5", std::string("blurry"), true, options, 64, 64);
    EXPECT_EQ(s.and_weights, (std::vector<double>{1.0, 0.5}));
    ASSERT_EQ(s.parts.size(), 1u);
    ASSERT_TRUE(s.parts[0].negative.has_value());
    const Tensor& ctx = s.parts[0].joint.context;
    ASSERT_EQ(ctx.shape(), (Shape{2, 154, 32}));
    const int64_t width = 32;
    for (int64_t t = 77; t < 154; ++t)
        for (int64_t d = 0; d < width; ++d) ASSERT_EQ(ctx[t * width + d], ctx[76 * width + d]) << t;
    // The short part's own 77 rows are those of the same text encoded alone, up to float32 rounding: BLAS may
    // sum a row of a batch in another order than the same row alone (OpenBLAS's kernels below AVX-512, which it
    // also takes on a CPU it does not know: 1e-6 apart at 0.74, some 17 ulp, after the encoder's layers).
    // 1e-5 of the rows' scale is ten times that, and far below what another token changes.
    const ConditioningSchedule alone = encode_conditioning_schedule(model, "a dog", std::string("blurry"), true, options, 64, 64);
    const Tensor& a = alone.parts[0].joint.context;  // [negative, "a dog"]
    float scale = 1.0f;
    for (int64_t i = 0; i < 77 * width; ++i) scale = std::max(scale, std::fabs(a[77 * width + i]));
    for (int64_t i = 0; i < 77 * width; ++i) ASSERT_NEAR(ctx[i], a[77 * width + i], 1e-5f * scale) << i;

    // The negative prompt is not split; a prompt without AND and weight is one part of weight 1.
    const ConditioningSchedule plain =
        encode_conditioning_schedule(model, "a dog", std::string("a AND b:0.5"), true, options, 64, 64);
    EXPECT_EQ(plain.and_weights, (std::vector<double>{1.0}));
    EXPECT_EQ(plain.parts[0].joint.context.dim(0), 2);
    // A weight that is not finite is an error, as the webui would sample NaN.
    EXPECT_THROW(encode_conditioning_schedule(model, "a dog:" + std::string(400, '9'), std::nullopt, true, options, 64, 64),
                 Error);
}
