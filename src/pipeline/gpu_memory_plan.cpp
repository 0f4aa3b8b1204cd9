#include "pipeline/gpu_memory_plan.h"

#include <algorithm>

#include "kiln/error.h"
#include "pipeline/dry_run_plan.h"
#include "pipeline/memory_check.h"

namespace kiln {

const char* gpu_weight_placement_name(GpuWeightPlacement p) {
    switch (p) {
        case GpuWeightPlacement::Resident: return "every weight resident";
        case GpuWeightPlacement::Stages: return "text encoders and VAE on the device only in their stage, UNet resident";
        case GpuWeightPlacement::EachStage: return "each component on the device only in its stage";
        case GpuWeightPlacement::Streamed:
            return "each component on the device only in its stage, the UNet's blocks streamed in each call";
    }
    return "?";
}

GpuWeightPlacement parse_gpu_weight_placement(const std::string& name) {
    if (name == "resident") return GpuWeightPlacement::Resident;
    if (name == "stages") return GpuWeightPlacement::Stages;
    if (name == "each_stage") return GpuWeightPlacement::EachStage;
    if (name == "streamed") return GpuWeightPlacement::Streamed;
    fail(ErrorKind::InvalidArgument,
         "unknown weight placement '" + name + "' (resident, stages, each_stage or streamed)");
}

int64_t GpuMemoryPlan::peak() const {
    int64_t most = 0;
    for (const StageEstimate& s : stages) most = std::max(most, s.total(0));
    return most;
}

std::string GpuMemoryPlan::describe() const {
    std::string out = "  weights: " + std::string(gpu_weight_placement_name(weights)) +
                      "; VAE decode: " + (vae_tiled ? "in bands" : "whole") + "\n";
    out += "  " + describe_unet_rows(batch, extras.unet_rows_per_image) + "\n";
    if (!extras.unmerged_loras.empty())
        out += "  LoRA merges: " + std::to_string(extras.unmerged_loras.modules) + " weights, no more device memory\n";
    for (const StageEstimate& s : stages)
        out += "  " + s.stage + ": " + format_mib(s.total(0)) + " (weights on the device " + format_mib(s.pages) +
               ", activations " + format_mib(s.activations) + ": " +
               (!s.derived                ? "estimated"
                : s.stage == "denoise" && weights == GpuWeightPlacement::Streamed
                    ? "a UNet call run dry through the backend's ops, its streamed blocks' weights as held at its peak"
                : s.stage == "denoise"    ? "a UNet call run dry through the backend's ops"
                : s.stage == "vae_decode" ? "the decode run dry through the backend's ops"
                                          : "the encoders run dry through the backend's ops") +
               ")\n";
    out += "  predicted peak of kiln's device memory: " + format_mib(peak()) + "\n";
    if (uploads_per_generation > 0 || uploads_per_unet_call > 0)
        out += "  fitting uploads weights again: " + format_mib(uploads_per_generation) + " each generation" +
               (uploads_per_unet_call > 0 ? ", " + format_mib(uploads_per_unet_call) + " each UNet call" : "") + "\n";
    return out;
}

namespace {

int64_t text_encoder_bytes(const StableDiffusionModel& model) {
    int64_t sum = 0;
    for (const TextEncoder& te : model.text_encoders) sum += te.model.device_weights().bytes();
    return sum;
}

// The CPU estimates (memory_check.h, vae_tiling.h) are of float32 activations plus the CPU ops' scratch; on
// a GPU the activations are in the component's dtype, and the scratch is the backends' (attention's score
// blocks, a convolution's workspace). The scratch figures are from SD 1.5 at 512x512 on an H200 with
// KILN_PLAN_CHECK=1 (docs/MEMORY.md): the text encoders held 2 MiB beside their weights, a streamed UNet call
// about 105 MiB (the estimate gives 70 of activations), the whole VAE decode 543 MiB with its weights (the
// estimate 256 of activations). A shape's first call, which picks the algorithms, holds more (the plan does
// not count it; generate() falls back to a leaner placement when it does not fit).
constexpr int64_t kMiB = int64_t(1) << 20;
constexpr int64_t kTextScratch = 16 * kMiB, kUNetScratch = 128 * kMiB, kVaeScratch = 192 * kMiB;

int64_t in_dtype(int64_t cpu_estimate, DType dtype, int64_t scratch) {
    const int64_t activations = std::max<int64_t>(0, cpu_estimate - ops_scratch_bytes());
    return activations / 4 * int64_t(dtype_size(dtype)) + scratch;
}

// The stages' activations a dry run through the backend's ops gives (dry_run_plan.h), found once for every plan; -1
// where it gives none (then the CPU estimates in the model's dtype and the fitted scratch).
struct DryFigures {
    int64_t text_encode, unet_call, vae_decode;
    StreamedCallPeak streamed_call;  // where a plan streams the UNet
};

DryFigures dry_figures(const StableDiffusionModel& model, int width, int height, int batch, const PlanExtras& extras,
                       bool whole_decode, bool streamed) {
    const int rows = batch * extras.unet_rows_per_image;
    // The streamed replay's first pass is the plain call: one dry call fewer where both are wanted.
    const StreamedCallPeak s = streamed ? streamed_unet_call_peak(model, width, height, rows) : StreamedCallPeak{};
    return {text_encode_peak_bytes(model, extras.unet_rows_per_image),
            streamed ? s.call : unet_call_peak_bytes(model, width, height, rows),
            whole_decode ? vae_decode_peak_bytes(model, width, height, batch) : -1, s};
}

// A stage whose activations come from the dry run where it gave a figure, else from `estimate`.
StageEstimate stage_of(const std::string& name, int64_t weights, int64_t dry, int64_t estimate) {
    return {name, weights, dry >= 0 ? dry : estimate, dry >= 0};
}

GpuMemoryPlan make_plan(const StableDiffusionModel& model, int width, int height, int batch,
                        GpuWeightPlacement weights, bool vae_tiled, const PlanExtras& extras, const DryFigures& dry) {
    GpuMemoryPlan p;
    p.weights = weights;
    p.vae_tiled = vae_tiled;
    p.batch = batch;
    p.extras = extras;
    const int64_t text = text_encoder_bytes(model);
    const int64_t unet = model.unet ? model.unet->device_weights().bytes() : 0;
    const int64_t vae = model.vae ? model.vae->device_weights().bytes() : 0;
    const bool resident = weights == GpuWeightPlacement::Resident;
    const bool unet_stays = resident || weights == GpuWeightPlacement::Stages;
    if (!resident) {
        const int64_t streamed = model.unet && weights == GpuWeightPlacement::Streamed ? model.unet->streamed_block_bytes() : 0;
        p.uploads_per_generation = text + vae + (unet_stays ? 0 : unet - streamed);
        p.uploads_per_unet_call = streamed;
    }
    // Text encoding: a few [B, 77, hidden] tensors, small next to the weights.
    p.stages.push_back(
        stage_of("text_encode", text + (unet_stays ? unet : 0) + (resident ? vae : 0), dry.text_encode, kTextScratch));
    if (model.unet && weights == GpuWeightPlacement::Streamed && dry.streamed_call.blocks >= 0) {
        // A streamed call replayed dry: what no block owns, the blocks held when the call's peak is reached, and
        // its tensors then (dry_run_plan.h), not the two largest blocks beside the largest activations.
        p.stages.push_back({"denoise", unet - model.unet->streamed_block_bytes() + dry.streamed_call.blocks,
                            dry.streamed_call.activations, true});
    } else if (model.unet) {
        const int64_t held = weights == GpuWeightPlacement::Streamed ? model.unet->streamed_device_bytes() : unet;
        p.stages.push_back(stage_of("denoise", held + (resident ? text + vae : 0), dry.unet_call,
                                    in_dtype(estimate_unet_activation_bytes(model, width, height, batch,
                                                                            extras.unet_rows_per_image),
                                             model.precision, kUNetScratch)));
    }
    // The decode in bands keeps its estimate: its band size comes from the budget (generate.cpp).
    if (model.vae)
        p.stages.push_back(stage_of("vae_decode", vae + (unet_stays ? unet : 0) + (resident ? text : 0),
                                    vae_tiled ? -1 : dry.vae_decode,
                                    in_dtype(estimate_vae_decode_bytes(model, width, height, batch, vae_tiled),
                                             model.vae->weight_dtype(), kVaeScratch)));
    return p;
}

}  // namespace

std::vector<GpuMemoryPlan> gpu_memory_plans(const StableDiffusionModel& model, int width, int height, int batch,
                                            VaeTiling tiling, const PlanExtras& extras) {
    std::vector<GpuMemoryPlan> plans;
    const DryFigures dry = dry_figures(model, width, height, batch, extras, tiling != VaeTiling::On, true);
    for (GpuWeightPlacement w : {GpuWeightPlacement::Resident, GpuWeightPlacement::Stages,
                                 GpuWeightPlacement::EachStage, GpuWeightPlacement::Streamed}) {
        if (tiling != VaeTiling::On) plans.push_back(make_plan(model, width, height, batch, w, false, extras, dry));
        if (tiling != VaeTiling::Off) plans.push_back(make_plan(model, width, height, batch, w, true, extras, dry));
    }
    return plans;
}

GpuMemoryPlan plan_gpu_memory(const StableDiffusionModel& model, int width, int height, int batch, int64_t budget,
                              VaeTiling tiling, const PlanExtras& extras) {
    const std::vector<GpuMemoryPlan> plans = gpu_memory_plans(model, width, height, batch, tiling, extras);
    const GpuMemoryPlan* leanest = nullptr;
    if (const GpuMemoryPlan* p = first_plan_within(plans, budget, leanest)) return *p;
    fail(ErrorKind::OutOfMemory,
         "a device memory budget of " + format_mib(budget) + " is too small: the leanest plan (" +
             gpu_weight_placement_name(leanest->weights) + ", VAE decode " + (leanest->vae_tiled ? "in bands" : "whole") +
             ") needs about " + format_mib(leanest->peak()) + " (--vram " + budget_in_mib(leanest->peak()) + ")");
}

GpuMemoryPlan gpu_memory_plan_with(const StableDiffusionModel& model, int width, int height, int batch,
                                   GpuWeightPlacement weights, VaeTiling tiling, const PlanExtras& extras) {
    const DryFigures dry = dry_figures(model, width, height, batch, extras, tiling != VaeTiling::On,
                                       weights == GpuWeightPlacement::Streamed);
    return make_plan(model, width, height, batch, weights, tiling == VaeTiling::On, extras, dry);
}

void place_weights_for_stage(const StableDiffusionModel& model, const GpuMemoryPlan& plan, const std::string& stage) {
    const bool resident = plan.weights == GpuWeightPlacement::Resident;
    const bool unet_stays = resident || plan.weights == GpuWeightPlacement::Stages;
    const bool text = stage == "text_encode", denoise = stage == "denoise", decode = stage == "vae_decode" || stage == "vae_encode";
    // A recorded call holds its activations in a pool of its own for its replays: outside the placements that
    // keep everything, a component's recordings go with its stage (the next generation records them again).
    if (!resident) {
        if (!text)
            for (const TextEncoder& te : model.text_encoders) te.model.device_weights().forget_recordings();
        if (model.unet && !denoise) model.unet->device_weights().forget_recordings();
    }
    // What leaves first, so that what comes back has the room.
    if (!resident && !text)
        for (const TextEncoder& te : model.text_encoders) te.model.device_weights().offload();
    if (model.vae && !resident && !decode) model.vae->device_weights().offload();
    if (model.unet && !unet_stays && !denoise) model.unet->device_weights().offload();
    if (model.unet && denoise && plan.weights == GpuWeightPlacement::Streamed) model.unet->place_for_streaming();
    // Then what the stage needs (in the resident placements, everything).
    if (text || resident)
        for (const TextEncoder& te : model.text_encoders) te.model.device_weights().restore();
    if (model.unet && (unet_stays || (denoise && plan.weights != GpuWeightPlacement::Streamed)))
        model.unet->device_weights().restore();
    if (model.vae && (decode || resident)) model.vae->device_weights().restore();
}

}  // namespace kiln
