// Prompt editing in whole generations: the switch happens at the model call the webui's denoiser switches at
// (it counts calls, Heun's 2n - 1, against a schedule over 2n): "[cat:dog:K]" is "cat" throughout for K >= 2n - 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/fixtures.h"
#include "pipeline/generate.h"

using namespace kiln;
using kiln::test::data_path;

namespace {

Tensor latents(const StableDiffusionModel& model, const std::string& prompt, const std::string& sampler, int steps) {
    GenerationRequest r;
    r.prompt = prompt;
    r.negative_prompt = "blurry";
    r.width = r.height = 64;
    r.steps = steps;
    r.sampler = sampler;
    r.seed = 7;
    return generate(model, r).final_latent;
}

// The same latents up to float32 rounding. A prompt with an edit encodes its texts together in one batch, and
// BLAS may round a row of a batch differently from the same row alone (OpenBLAS's kernels below AVX-512, which it
// also takes on a CPU it does not know: single-ulp differences in the text encoder), which the few UNet calls
// then carry (8e-7 of the latents' scale on the test model). 2e-5 of the scale is far above that and far below the
// smallest real change here, the switch at the last Heun call (7e-4).
bool same(const Tensor& a, const Tensor& b) {
    if (a.shape() != b.shape()) return false;
    float scale = 1.0f, most = 0.0f;
    for (int64_t i = 0; i < a.numel(); ++i) {
        scale = std::max(scale, std::fabs(a[i]));
        most = std::max(most, std::fabs(a[i] - b[i]));
    }
    return most <= 2e-5f * scale;
}

TEST(PromptEditingGeneration, SwitchesAtTheWebuisModelCall) {
    const StableDiffusionModel model = load_model(data_path("sd15-mini/diffusers"));
    const int n = 3;  // Heun: calls 0..4, schedule over 6
    const Tensor never = latents(model, "a [cat:dog:100] on a hill", "heun", n);
    EXPECT_TRUE(same(latents(model, "a [cat:dog:4] on a hill", "heun", n), never));
    const Tensor last_call = latents(model, "a [cat:dog:3] on a hill", "heun", n);
    EXPECT_FALSE(same(last_call, never));
    EXPECT_FALSE(same(last_call, latents(model, "a [cat:dog:0] on a hill", "heun", n)));
    // Euler: one call a step, the schedule over the steps; call n - 1 is the last.
    const Tensor euler_never = latents(model, "a [cat:dog:100] on a hill", "euler", n);
    EXPECT_TRUE(same(latents(model, "a [cat:dog:2] on a hill", "euler", n), euler_never));
    EXPECT_FALSE(same(latents(model, "a [cat:dog:1] on a hill", "euler", n), euler_never));
}

// Prompts of different chunk counts run the UNet on each apart; the result is the guided one, not one of
// the halves, and is finite.
TEST(PromptEditingGeneration, LongPromptAgainstShortNegative) {
    const StableDiffusionModel model = load_model(data_path("sdxl-mini/diffusers"));
    std::string prompt = "a cat BREAK a dog";
    const Tensor a = latents(model, prompt, "euler", 2);
    for (int64_t i = 0; i < a.numel(); ++i) ASSERT_TRUE(std::isfinite(a[i]));
    EXPECT_FALSE(same(a, latents(model, "a cat a dog", "euler", 2)));
}

}  // namespace
