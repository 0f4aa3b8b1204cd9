// The memory pre-check (pipeline/memory_check.h). estimate_activation_bytes claims the peak of what a
// generation holds beyond the loaded weights; check_memory_for refuses, before any work, a request whose
// estimate exceeds the memory the host has free. The estimate is checked against what kiln's own
// accounting (core/memory.h) measures during real runs, and for how it must grow with the image.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "common/fixtures.h"
#include "core/memory.h"
#include "kiln/error.h"
#include "pipeline/conditioning.h"
#include "pipeline/generate.h"
#include "pipeline/memory_check.h"

using namespace kiln;
using kiln::test::data_path;

namespace {

// The demo model (SD 1.x layout, 32-channel VAE) and the SDXL fixture mini (8-channel VAE), each at two sizes
// large enough that the convolutions' scratch has reached its budget at both: what grows between them is
// activations.
struct Case {
    std::string name, path;
    int small, large;  // square sides
};
std::vector<Case> cases() {
    return {{"kiln-shapes", KILN_DEMO_MODEL, 128, 192}, {"sdxl-mini", data_path("sdxl-mini/diffusers"), 192, 320}};
}

StableDiffusionModel load(const Case& c) {
    LoadOptions o;
    o.vae_encoder = false;  // txt2img, as the kiln program loads for it
    return load_model(c.path, o);
}

// The most bytes held at once during a one-step generation of side x side beyond what was held before it
// (the weights and anything else alive): what the estimate speaks for.
int64_t measured_peak(const StableDiffusionModel& model, int side, int batch = 1) {
    GenerationRequest r;
    r.prompt = "a red circle";
    r.width = r.height = side;
    r.steps = 1;
    r.batch_size = batch;
    const int64_t before = memory_stats().device("cpu").total.current;
    reset_memory_peaks();
    (void)generate(model, r);
    return memory_stats().device("cpu").total.peak - before;
}

double mib(int64_t bytes) { return bytes / 1048576.0; }

// The peak one UNet call of `rows` rows holds beyond its inputs (a 77-token context).
int64_t unet_call_peak(const StableDiffusionModel& model, int side, int64_t rows) {
    const UNetConfig& c = model.unet->config();
    const Tensor x({rows, 4, side / 8, side / 8}), t({rows}, std::vector<float>(size_t(rows), 500.0f)),
        context({rows, 77, c.cross_attention_dim});
    const int64_t extra = c.projection_class_embeddings_input_dim - 6 * c.addition_time_embed_dim;  // SDXL's pooled
    const Tensor pooled({rows, std::max<int64_t>(extra, 1)}), ids({rows, 6}, std::vector<float>(size_t(rows) * 6, 64.0f));
    UNetInputs in{&x, &t, &context};
    if (c.addition_time_embed_dim > 0) in.text_embeds = &pooled, in.time_ids = &ids;
    const int64_t before = memory_stats().device("cpu").total.current;
    reset_memory_peaks();
    (void)model.unet->forward(in);
    return memory_stats().device("cpu").total.peak - before;
}

}  // namespace

// The estimate bounds the real peak (it counts four full-resolution VAE tensors where three are alive, and
// the ops' scratch at its budget), and it grows at least as fast as the real peak does: a constant margin
// cannot hide a per-pixel term that is too small.
TEST(MemoryCheck, EstimateCoversTheMeasuredPeakAndItsGrowth) {
    for (const Case& c : cases()) {
        const StableDiffusionModel model = load(c);
        const auto t0 = std::chrono::steady_clock::now();
        const int64_t small = measured_peak(model, c.small), large = measured_peak(model, c.large);
        const int64_t small_estimate = estimate_activation_bytes(model, c.small, c.small);
        const int64_t large_estimate = estimate_activation_bytes(model, c.large, c.large);
        std::printf("[ memory   ] %-11s peak %.1f / %.1f MiB at %d / %d px, estimate %.1f / %.1f MiB (%.1f s)\n",
                    c.name.c_str(), mib(small), mib(large), c.small, c.large, mib(small_estimate),
                    mib(large_estimate),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        EXPECT_LE(small, small_estimate) << c.name << " at " << c.small;
        EXPECT_LE(large, large_estimate) << c.name << " at " << c.large;
        EXPECT_LE(large - small, large_estimate - small_estimate) << c.name;
    }
}

// A batch runs the UNet and the VAE decode on all its images at once: its activations grow with the batch, and
// the estimate must cover them (the scratch does not grow: one image's estimate already holds it).
TEST(MemoryCheck, EstimateCoversABatch) {
    const Case c = cases()[0];
    const StableDiffusionModel model = load(c);
    const int64_t one = measured_peak(model, c.small), three = measured_peak(model, c.small, 3);
    const int64_t estimate = estimate_activation_bytes(model, c.small, c.small, 3);
    std::printf("[ memory   ] %-11s batch of 3 at %d px: peak %.1f MiB (one image %.1f), estimate %.1f MiB\n",
                c.name.c_str(), c.small, mib(three), mib(one), mib(estimate));
    EXPECT_LE(three, estimate);
    EXPECT_LE(three - one, estimate - estimate_activation_bytes(model, c.small, c.small));
}

// kiln's activations are per pixel (convolutions, and attention in blocks of queries: ops/attention.cpp), so
// the estimate must not shrink as either side grows, and beyond its constant it must grow as the pixel count:
// doubling both sides adds four times what the previous doubling added (sides where every level's token
// count divides exactly).
TEST(MemoryCheck, EstimateGrowsAsThePixelCount) {
    for (const Case& c : cases()) {
        const StableDiffusionModel model = load(c);
        for (int fixed : {64, 512})
            for (int side = 64; side < 2048; side += 64) {
                const int next = side + 64;
                EXPECT_LE(estimate_activation_bytes(model, side, fixed), estimate_activation_bytes(model, next, fixed))
                    << c.name << ": width " << side << " to " << next;
                EXPECT_LE(estimate_activation_bytes(model, fixed, side), estimate_activation_bytes(model, fixed, next))
                    << c.name << ": height " << side << " to " << next;
            }
        auto at = [&](int side) { return estimate_activation_bytes(model, side, side); };
        EXPECT_EQ(at(2048) - at(1024), 4 * (at(1024) - at(512))) << c.name;
        EXPECT_GT(at(1024), at(512)) << c.name;
    }
}

// A request whose estimate exceeds the host's free memory is refused before any work, as OutOfMemory naming
// the size and the estimate; one that fits passes.
TEST(MemoryCheck, RefusesWhatDoesNotFitNamingTheFigures) {
    const int64_t free = available_host_bytes();
    if (free < 0) GTEST_SKIP() << "this system does not say how much memory is available";
    const StableDiffusionModel model = load(cases()[0]);
    EXPECT_NO_THROW(check_memory_for(model, 64, 64))
        << "64x64 needs about " << mib(estimate_activation_bytes(model, 64, 64)) << " MiB";
    int side = 1024;
    while (estimate_activation_bytes(model, side, side) <= free) side *= 2;
    char need[32];
    std::snprintf(need, sizeof need, "%.1f GiB", estimate_activation_bytes(model, side, side) / 1073741824.0);
    try {
        check_memory_for(model, side, side);
        ADD_FAILURE() << side << "x" << side << " passed the check";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory) << msg;
        const std::string size = std::to_string(side) + "x" + std::to_string(side);
        for (const std::string& part : {size, std::string(need), std::string("available")})
            EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
    }
}

// The rows counted from the prompt (unet_rows_per_image, for the plans) are the UNet calls': the negative and each
// AND part with guidance, the prompt alone without, a composed prompt guided at any scale (as the webui).
TEST(MemoryCheck, RowsCountedFromThePromptAreTheCalls) {
    const StableDiffusionModel model = load(cases()[0]);
    for (const auto& [prompt, cfg] : std::vector<std::pair<std::string, float>>{
             {"a", 7.5f}, {"a", 1.0f}, {"a AND b", 7.5f}, {"a AND b AND c :0.5", 1.0f}, {"a :0.7", 1.0f}}) {
        GenerationRequest r;
        r.prompt = prompt;
        r.width = r.height = 64;
        r.steps = 1;
        r.cfg_scale = cfg;
        int64_t rows = 0;
        r.unet_observer = [&](const UNetInputs& in, const Tensor&) { rows = std::max(rows, in.sample->dim(0)); };
        (void)generate(model, r);
        EXPECT_EQ(rows, unet_rows_per_image(prompt, PromptSyntax::A1111, cfg > 1.0f)) << prompt << " at CFG " << cfg;
    }
}

// A call's measured peak of 2 rows (a plain prompt) and of 4 (three AND parts) are covered by the estimate, which
// grows at least as much between them (an estimate of 2 rows whatever the prompt would not grow).
TEST(MemoryCheck, UNetEstimateCoversTheRowsOfAndParts) {
    for (const Case& c : cases()) {
        const StableDiffusionModel model = load(c);
        for (int side : {64, c.small}) {
            const int64_t two = unet_call_peak(model, side, 2), four = unet_call_peak(model, side, 4);
            const int64_t two_estimate = estimate_unet_activation_bytes(model, side, side, 1, 2);
            const int64_t four_estimate = estimate_unet_activation_bytes(model, side, side, 1, 4);
            std::printf("[ memory   ] %-11s %d px: 2 / 4 rows %.2f / %.2f MiB, estimate %.2f / %.2f MiB\n",
                        c.name.c_str(), side, mib(two), mib(four), mib(two_estimate), mib(four_estimate));
            EXPECT_LE(four, four_estimate) << c.name;
            EXPECT_LE(four - two, four_estimate - two_estimate) << c.name << " at " << side;
        }
    }
}
