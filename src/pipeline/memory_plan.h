// How a CPU generation holds its memory, stage by stage, and the leanest-enough way to stay within a budget
// (--memory). The weights the CPU reads in place from the mapped file (WeightPages) count in the resident set
// while their pages are mapped in; the plan says when they leave it:
// - between stages (always: the kernel reads dropped pages again from the page cache, which costs little
//   next to a CPU stage): the text encoders' pages go once the prompt is encoded, the UNet's before the
//   decode, the VAE's after it;
// - inside each UNet call, block by block (streamed), when the budget needs it: each call then reads the
//   UNet's pages in again, from the page cache where the kernel kept them;
// - and the VAE decodes in bands (vae_tiling.h) when the whole decode does not fit.
// Estimates are of the resident set: what the process held before loading (libraries, heap), the weights
// kiln copied (always resident), the pages of the stage's component, and the stage's activations.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/model.h"
#include "pipeline/lora_memory.h"
#include "pipeline/memory_check.h"
#include "pipeline/vae_tiling.h"

namespace kiln {

// "1.6G", "512M", "400MiB", "3GB", "2048K" or a number of bytes: binary units (G = GiB). 0, negative, or
// anything else: InvalidArgument naming `what` (the option).
int64_t parse_byte_size(const std::string& text, const std::string& what);
std::string format_mib(int64_t bytes);  // "1638 MiB"

struct StageEstimate {
    std::string stage;           // "text_encode", "denoise", "vae_decode"
    int64_t pages = 0;           // the mapped weights resident during it
    int64_t activations = 0;     // its activations and the ops' scratch
    bool derived = false;        // GPU plans: activations from a dry run through the backend's ops (dry_run_plan.h)
    int64_t total(int64_t fixed) const { return fixed + pages + activations; }
};

// What the plans count beyond the image size and the batch.
struct PlanExtras {
    int unet_rows_per_image = kGuidedUNetRows;  // unet_rows_per_image (conditioning.h)
    LoraMergeEstimate unmerged_loras;           // kiln plan's: a generation's model holds its copies
};

struct MemoryPlan {
    bool stream_unet = false;    // drop each UNet block's pages after it runs
    bool vae_tiled = false;      // decode in bands
    int64_t fixed = 0;           // resident whatever the stage: the process before loading, copied weights
    int batch = 1;               // images, each with extras.unet_rows_per_image rows in a UNet call
    PlanExtras extras;           // (fixed includes extras.unmerged_loras.merged_bytes)
    std::vector<StageEstimate> stages;
    int64_t peak() const;
    // One line per stage and the configuration, for `kiln plan` and --verbose output.
    std::string describe() const;
};

// Every component's mapped pages out of the resident set (they come back when read).
void drop_weight_pages(const StableDiffusionModel& model);

// The resident set whatever the stage: measured now, after drop_weight_pages and giving the heap's free blocks
// back (so, between generations: the process, its libraries and the weights kiln copied).
int64_t measure_fixed_bytes(const StableDiffusionModel& model);

// Every configuration `tiling` allows, from the fastest to the leanest, for `batch` width x height images.
std::vector<MemoryPlan> cpu_memory_plans(const StableDiffusionModel& model, int width, int height, int batch,
                                         VaeTiling tiling, int64_t fixed, const PlanExtras& extras = {});

// The first plan whose peak fits `budget` (< 0: the first). None: OutOfMemory naming the smallest budget that
// would do, in whole MiB (--memory NNNM).
MemoryPlan choose_memory_plan(const std::vector<MemoryPlan>& plans, int64_t budget);

// Shared by the CPU's and the GPU's plans (gpu_memory_plan.h): the first of `plans` (fastest first) whose peak()
// fits `budget` (< 0: the first), or null when none does; `leanest` is then the one of the smallest peak, for
// the error that names a budget that would do.
template <class Plan>
const Plan* first_plan_within(const std::vector<Plan>& plans, int64_t budget, const Plan*& leanest) {
    leanest = plans.empty() ? nullptr : &plans.front();
    for (const Plan& p : plans) {
        if (budget < 0 || p.peak() <= budget) return &p;
        if (p.peak() < leanest->peak()) leanest = &p;
    }
    return nullptr;
}

// The smallest budget that holds `peak`, in whole MiB as an option takes it: "1234M".
std::string budget_in_mib(int64_t peak);

// The plan for `batch` width x height images on the CPU: the fastest configuration whose estimated peak fits
// `budget` bytes (< 0: no budget, so no streaming; the decode whole unless `tiling` is On; Off never tiles), with
// the fixed part measured now (measure_fixed_bytes): call it between generations.
MemoryPlan plan_cpu_memory(const StableDiffusionModel& model, int width, int height, int batch, int64_t budget,
                           VaeTiling tiling = VaeTiling::Auto, const PlanExtras& extras = {});

std::string describe_unet_rows(int batch, int rows_per_image);  // "UNet calls: 4 rows (2 an image: ...)"

}  // namespace kiln
