// LoRA merges estimated from the files' headers (pipeline/lora_memory.h) against kiln's accounting (core/memory.h)
// of the model loaded with them merged: counts of bytes, so equal; and kiln plan's plan is the merged model's.
#include <gtest/gtest.h>

#include "core/memory.h"
#include "lora_test_files.h"
#include "pipeline/lora_memory.h"
#include "pipeline/memory_plan.h"

using namespace kiln;
using namespace kiln::test;

namespace {

// Loads `path` with `loras` into `out`: the weights' copies and mapped pages the load added.
std::pair<int64_t, int64_t> load(const std::string& path, const std::vector<LoraApplication>& loras,
                                 StableDiffusionModel& out) {
    LoadOptions o;
    o.vae_encoder = false;
    o.loras = loras;
    const DeviceMemoryStats a = memory_stats().device("cpu");
    out = load_model(path, o);
    const DeviceMemoryStats b = memory_stats().device("cpu");
    return {b[MemoryCategory::Weights].current - a[MemoryCategory::Weights].current,
            b[MemoryCategory::MappedFile].current - a[MemoryCategory::MappedFile].current};
}

void expect_estimate_is_the_merge(const std::string& model, const std::string& lora) {
    for (const std::string& path : {data_path(model + "/diffusers"), data_path(model + "/" + model + ".safetensors")}) {
        SCOPED_TRACE(lora + " on " + path);
        StableDiffusionModel warm, plain, merged;  // all alive: each load's figures are its own
        (void)load(path, {}, warm);                 // what a first load makes once
        const auto without = load(path, {}, plain), with = load(path, {{lora, "x", 0.8, 0.8}}, merged);
        const LoraMergeEstimate e = estimate_lora_merge(plain, {{lora, "x", 0.8, 0.8}});
        EXPECT_GT(e.merged_bytes, 0);  // and a file given twice merges once:
        EXPECT_EQ(estimate_lora_merge(plain, {{lora, "x", 1, 1}, {lora, "y", 1, 1}}).merged_bytes, e.merged_bytes);
        EXPECT_EQ(with.first - without.first, e.merged_bytes);
        EXPECT_EQ(without.second - with.second, e.text_pages + e.unet_pages);
        PlanExtras extras;
        extras.unmerged_loras = e;
        const MemoryPlan planned = cpu_memory_plans(plain, 64, 64, 1, VaeTiling::Off, 0, extras)[0];
        const MemoryPlan real = cpu_memory_plans(merged, 64, 64, 1, VaeTiling::Off, e.merged_bytes)[0];
        for (size_t s = 0; s < real.stages.size(); ++s)
            EXPECT_EQ(planned.stages[s].total(planned.fixed), real.stages[s].total(real.fixed));
        EXPECT_NE(planned.describe().find("LoRA merges (from the files' headers): " + std::to_string(e.modules)),
                  std::string::npos);
    }
}

}  // namespace

// kohya with LoCon and diffusers naming (SDXL's two encoders), LoHa, LoKr; fp16 fixtures: views become float32
// copies and the UNet's stacks widen to float32.
TEST(LoraMemory, EstimateFromHeadersIsWhatTheMergeHolds) {
    TempDir dir;
    for (const LoraCase& c : {LoraCase{"a", "sd15-mini", "kohya", true, DType::F16, 11},
                              LoraCase{"b", "sdxl-mini", "diffusers", false, DType::F32, 14}})
        expect_estimate_is_the_merge(c.model, write_random_lora(c, dir));
    for (const LycorisCase& c : {LycorisCase{"c", "sd15-mini", "loha", DType::F32, 21, 4, 2.0f, 0.25f, 0, false},
                                 LycorisCase{"d", "sd15-mini", "lokr", DType::F16, 22, 2, 1.0f, 0.125f, 4, false}}) {
        write_safetensors(dir.file(c.name), make_random_lycoris(c), c.stored);
        expect_estimate_is_the_merge(c.model, dir.file(c.name));
    }
}
