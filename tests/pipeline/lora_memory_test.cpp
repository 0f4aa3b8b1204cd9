// The LoRA merge's memory estimate (pipeline/lora_memory.h), made from the files' headers for a model loaded
// without them, against what kiln's own accounting (core/memory.h) measures when the same model loads with them
// merged: the host bytes of its weights beyond the mapped file (the float32 copies, the stacks widened to float32)
// and the mapped pages they replace. Both are counts of bytes, so they must agree exactly. Then the CPU plan kiln
// plan makes from the estimate is the plan of the merged model.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/memory.h"
#include "lora_test_files.h"
#include "pipeline/lora_memory.h"
#include "pipeline/memory_plan.h"

using namespace kiln;
using namespace kiln::test;

namespace {

struct Held {
    int64_t weights = 0, mapped = 0;  // bytes of kiln's accounting the load added: copies, views of the file
};

// Loads `path` with `loras` (none: unmerged), and what the load left held.
Held load_holding(const std::string& path, const std::vector<LoraApplication>& loras, StableDiffusionModel& out) {
    LoadOptions options;
    options.vae_encoder = false;
    options.loras = loras;
    const DeviceMemoryStats before = memory_stats().device("cpu");
    out = load_model(path, options);
    const DeviceMemoryStats after = memory_stats().device("cpu");
    return {after[MemoryCategory::Weights].current - before[MemoryCategory::Weights].current,
            after[MemoryCategory::MappedFile].current - before[MemoryCategory::MappedFile].current};
}

int64_t text_pages(const StableDiffusionModel& m) {
    int64_t sum = 0;
    for (const TextEncoder& te : m.text_encoders) sum += te.model.pages().bytes();
    return sum;
}

// The estimate for `lora` on both layouts of `model` against the merged load's measured figures.
void expect_estimate_matches_merge(const std::string& model, const std::string& name, const std::string& lora) {
    for (const std::string& path : {data_path(model + "/diffusers"), data_path(model + "/" + model + ".safetensors")}) {
        SCOPED_TRACE(name + " on " + path);
        const std::vector<LoraApplication> loras = {{lora, name, 0.8, 0.8}};
        StableDiffusionModel warm, plain, merged;  // all alive at once: each load's figures are its own
        (void)load_holding(path, {}, warm);         // a first load makes what any load makes once (caches)
        const Held without = load_holding(path, {}, plain), with = load_holding(path, loras, merged);
        const LoraMergeEstimate e = estimate_lora_merge(plain, loras);
        std::printf("[ lora mem ] %d weights: estimate %lld bytes held, %lld + %lld of pages replaced; measured %lld, "
                    "%lld\n",
                    e.modules, (long long)e.merged_bytes, (long long)e.text_pages, (long long)e.unet_pages,
                    (long long)(with.weights - without.weights), (long long)(without.mapped - with.mapped));
        EXPECT_GT(e.modules, 0);
        EXPECT_GT(e.merged_bytes, 0);
        EXPECT_EQ(with.weights - without.weights, e.merged_bytes);
        EXPECT_EQ(without.mapped - with.mapped, e.text_pages + e.unet_pages);
        EXPECT_EQ(text_pages(plain) - text_pages(merged), e.text_pages);
        EXPECT_EQ(plain.unet->pages().bytes() - merged.unet->pages().bytes(), e.unet_pages);
        // The merged model holds its copies already: nothing more to add for it.
        EXPECT_EQ(estimate_lora_merge(merged, {}).modules, 0);

        // kiln plan's plans (the unmerged model and the estimate) are the merged model's, for the same process.
        const int64_t fixed = 100 << 20;
        PlanExtras extras;
        extras.unmerged_loras = e;
        const std::vector<MemoryPlan> planned = cpu_memory_plans(plain, 64, 64, 1, VaeTiling::Off, fixed, extras);
        const std::vector<MemoryPlan> real =
            cpu_memory_plans(merged, 64, 64, 1, VaeTiling::Off, fixed + with.weights - without.weights);
        ASSERT_EQ(planned.size(), real.size());
        EXPECT_EQ(planned[0].fixed, real[0].fixed);
        for (size_t s = 0; s < real[0].stages.size(); ++s) {
            EXPECT_EQ(planned[0].stages[s].pages, real[0].stages[s].pages) << real[0].stages[s].stage;
            EXPECT_EQ(planned[0].stages[s].activations, real[0].stages[s].activations) << real[0].stages[s].stage;
        }
        EXPECT_NE(planned[0].describe().find("LoRA merges (from the files' headers): " + std::to_string(e.modules)),
                  std::string::npos)
            << planned[0].describe();
    }
}

}  // namespace

// kohya naming with LoCon (the UNet's attention, its resnets' 3x3 convolutions, the text encoder), fp16 factors;
// diffusers naming on SDXL's two encoders. The fixtures' weights are fp16: the views become float32 copies, the
// UNet's q|k|v and k|v stacks float32 stacks.
TEST(LoraMemory, EstimateFromHeadersIsWhatTheMergeHolds) {
    TempDir dir;
    for (const LoraCase& c : {LoraCase{"sd15_kohya", "sd15-mini", "kohya", true, DType::F16, 11},
                              LoraCase{"sdxl_diffusers", "sdxl-mini", "diffusers", false, DType::F32, 14}})
        expect_estimate_matches_merge(c.model, c.name, write_random_lora(c, dir));
}

// LoHa and LoKr (whole and factored w1, factored and whole w2, 4-d convolution factors): the change's size is read
// from each kind's factors.
TEST(LoraMemory, EstimateReadsLycorisFactorShapes) {
    TempDir dir;
    for (const LycorisCase& c : {LycorisCase{"sd15_loha", "sd15-mini", "loha", DType::F32, 21, 4, 2.0f, 0.25f, 0, false},
                                 LycorisCase{"sd15_lokr", "sd15-mini", "lokr", DType::F16, 22, 2, 1.0f, 0.125f, 4, false},
                                 LycorisCase{"sd15_lokr_both", "sd15-mini", "lokr", DType::F32, 23, 2, 1.0f, 0.25f, 8, true}}) {
        const std::string path = dir.file(c.name + ".safetensors");
        write_safetensors(path, make_random_lycoris(c), c.stored);
        expect_estimate_matches_merge(c.model, c.name, path);
    }
}

// Two files changing the same weights merge into one copy each; a module for a component the model lacks (SDXL's
// second encoder on SD 1.x) is no copy.
TEST(LoraMemory, EachWeightIsCountedOnce) {
    TempDir dir;
    const LoraCase a{"a", "sd15-mini", "kohya", false, DType::F16, 1}, b{"b", "sd15-mini", "diffusers", false, DType::F32, 2};
    const std::string pa = write_random_lora(a, dir), pb = write_random_lora(b, dir);
    StableDiffusionModel plain;
    (void)load_holding(data_path("sd15-mini/diffusers"), {}, plain);
    const LoraMergeEstimate one = estimate_lora_merge(plain, {{pa, "a", 1, 1}});
    const LoraMergeEstimate both = estimate_lora_merge(plain, {{pa, "a", 1, 1}, {pb, "b", 1, 1}});
    EXPECT_EQ(both.modules, one.modules);
    EXPECT_EQ(both.merged_bytes, one.merged_bytes);
    const LoraCase xl{"xl", "sdxl-mini", "kohya", false, DType::F16, 3};
    std::vector<std::pair<std::string, Tensor>> te2;
    for (auto& [key, t] : make_random_lora(xl))
        if (key.rfind("lora_te2_", 0) == 0) te2.push_back({key, t});
    ASSERT_FALSE(te2.empty());
    const std::string p2 = dir.file("te2.safetensors");
    write_safetensors(p2, te2, DType::F16);
    EXPECT_EQ(estimate_lora_merge(plain, {{p2, "te2", 1, 1}}).modules, 0);
}
