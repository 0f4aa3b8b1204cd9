// How a GPU generation holds device memory under a budget (--vram), stage by stage. Every allocation kiln makes
// on the device counts against the backend's cap (Backend::set_memory_limit); the plan decides where the
// weights are at each stage (DeviceWeights) so that the peak stays under it, from the fastest configuration to
// the leanest:
//   resident      every weight on the device throughout (what a run without a budget does);
//   stages        the text encoders on the device only while the prompt is encoded, the VAE only while it
//                 decodes; the UNet stays;
//   each_stage    the UNet too leaves the device for the other stages (it comes back once per generation);
//   streamed      the UNet's blocks come to the device one at a time inside each call, and leave after it;
// each with the VAE decode whole or in bands. The budget bounds kiln's own allocations; the driver's context
// and libraries come on top (docs/MEMORY.md has what they were measured at).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/model.h"
#include "pipeline/memory_plan.h"
#include "pipeline/vae_tiling.h"

namespace kiln {

enum class GpuWeightPlacement { Resident, Stages, EachStage, Streamed };
const char* gpu_weight_placement_name(GpuWeightPlacement p);  // a sentence, for kiln plan
// "resident", "stages", "each_stage", "streamed"; anything else is InvalidArgument.
GpuWeightPlacement parse_gpu_weight_placement(const std::string& name);

struct GpuMemoryPlan {
    GpuWeightPlacement weights = GpuWeightPlacement::Resident;
    bool vae_tiled = false;
    int batch = 1;
    PlanExtras extras;
    // `pages` holds the weights on the device during the stage; `derived` where its activations come from a dry run
    // through the backend's own ops (pipeline/dry_run_plan.h: Vulkan; not the decode in bands) rather than the
    // fitted estimate (CUDA).
    std::vector<StageEstimate> stages;
    // What fitting costs in copies: the bytes of weights uploaded again each generation (a component that left the
    // device comes back from its host copy) and in each UNet call (a streamed UNet's blocks).
    int64_t uploads_per_generation = 0;
    int64_t uploads_per_unet_call = 0;
    int64_t peak() const;
    std::string describe() const;
};

// Every configuration `tiling` allows, from the fastest to the leanest.
std::vector<GpuMemoryPlan> gpu_memory_plans(const StableDiffusionModel& model, int width, int height, int batch,
                                            VaeTiling tiling, const PlanExtras& extras = {});

// The first plan whose peak fits `budget` (< 0: the resident one, whole decode unless tiling is On). None: an
// OutOfMemory error naming the smallest budget that would do (--vram NNNM).
GpuMemoryPlan plan_gpu_memory(const StableDiffusionModel& model, int width, int height, int batch, int64_t budget,
                              VaeTiling tiling = VaeTiling::Auto, const PlanExtras& extras = {});
// The plan with the given placement (the decode whole unless `tiling` is On), whatever it needs.
GpuMemoryPlan gpu_memory_plan_with(const StableDiffusionModel& model, int width, int height, int batch,
                                   GpuWeightPlacement weights, VaeTiling tiling = VaeTiling::Auto,
                                   const PlanExtras& extras = {});

// Puts the weights where `plan` wants them before `stage` ("text_encode", "vae_encode", "denoise", "vae_decode"): what the
// stage does not need leaves first, then what it needs comes back. A streamed UNet's blocks all stay off the
// device here (the UNet brings them in, one at a time: stream_unet_block).
void place_weights_for_stage(const StableDiffusionModel& model, const GpuMemoryPlan& plan, const std::string& stage);

}  // namespace kiln
