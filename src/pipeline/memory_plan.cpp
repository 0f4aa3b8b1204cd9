#include "pipeline/memory_plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "kiln/error.h"
#include "pipeline/memory_check.h"
#include "pipeline/vae_tiling.h"
#include "runtime/process_usage.h"

namespace kiln {

int64_t parse_byte_size(const std::string& text, const std::string& what) {
    size_t used = 0;
    double value = 0;
    try {
        value = std::stod(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    std::string unit = text.substr(used);
    for (char& c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
    double scale = -1;
    if (unit.empty() || unit == "B") scale = 1;
    else if (unit == "K" || unit == "KB" || unit == "KIB") scale = 1024.0;
    else if (unit == "M" || unit == "MB" || unit == "MIB") scale = 1048576.0;
    else if (unit == "G" || unit == "GB" || unit == "GIB") scale = 1073741824.0;
    else if (unit == "T" || unit == "TB" || unit == "TIB") scale = 1099511627776.0;
    const double bytes = value * scale;
    require(used > 0 && scale > 0 && std::isfinite(bytes) && bytes >= 1 && bytes < 9.0e18, ErrorKind::InvalidArgument,
            what + " '" + text + "' is not a size (examples: 4G, 1.5G, 512M)");
    return static_cast<int64_t>(bytes);
}

std::string format_mib(int64_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f MiB", double(bytes) / 1048576.0);
    return buf;
}

void drop_weight_pages(const StableDiffusionModel& model) {
    for (const TextEncoder& te : model.text_encoders) te.model.pages().drop();
    if (model.unet) model.unet->pages().drop();
    if (model.vae) model.vae->pages().drop();
}

int64_t MemoryPlan::peak() const {
    int64_t most = fixed;
    for (const StageEstimate& s : stages) most = std::max(most, s.total(fixed));
    return most;
}

std::string MemoryPlan::describe() const {
    std::string out = "  UNet weights: " + std::string(stream_unet ? "streamed block by block" : "resident while sampling") +
                      "; VAE decode: " + (vae_tiled ? "in bands" : "whole") + "\n";
    out += "  " + describe_unet_rows(batch, extras.unet_rows_per_image) + "\n";
    if (!extras.unmerged_loras.empty()) out += "  " + extras.unmerged_loras.describe() + "\n";
    out += "  fixed (process, copied weights): " + format_mib(fixed) + "\n";
    for (const StageEstimate& s : stages)
        out += "  " + s.stage + ": " + format_mib(s.total(fixed)) + " (mapped weights " + format_mib(s.pages) +
               ", activations " + format_mib(s.activations) + ")\n";
    out += "  predicted peak: " + format_mib(peak()) + "\n";
    return out;
}

namespace {

// A text encoder's activations: a few [B, 77, hidden] float32 tensors and an MLP's four times wider, besides
// the ops' scratch; small next to its weights.
int64_t text_encode_bytes(const StableDiffusionModel& model) {
    int64_t hidden = 0;
    for (const TextEncoder& te : model.text_encoders) hidden = std::max<int64_t>(hidden, te.model.config().hidden);
    return 2 * 77 * hidden * 4 * 16 + ops_scratch_bytes();
}

MemoryPlan make_plan(const StableDiffusionModel& model, int width, int height, int batch, int64_t fixed,
                     bool stream_unet, bool vae_tiled, const PlanExtras& extras) {
    MemoryPlan p;
    const LoraMergeEstimate& lora = extras.unmerged_loras;
    p.fixed = fixed + lora.merged_bytes;  // heap memory
    p.stream_unet = stream_unet;
    p.vae_tiled = vae_tiled;
    p.batch = batch;
    p.extras = extras;
    int64_t text_pages = 0;
    for (const TextEncoder& te : model.text_encoders) text_pages += te.model.pages().bytes();
    p.stages.push_back({"text_encode", std::max<int64_t>(0, text_pages - lora.text_pages), text_encode_bytes(model)});
    if (model.unet) {
        const UNet& u = *model.unet;
        // (Streamed: the largest block's pages, LoRA or not; an over-estimate.)
        const int64_t pages =
            stream_unet ? u.streamed_page_bytes() : std::max<int64_t>(0, u.pages().bytes() - lora.unet_pages);
        p.stages.push_back({"denoise", pages,
                            estimate_unet_activation_bytes(model, width, height, batch, extras.unet_rows_per_image)});
    }
    if (model.vae)
        p.stages.push_back({"vae_decode", model.vae->pages().bytes(),
                            estimate_vae_decode_bytes(model, width, height, batch, vae_tiled)});
    return p;
}

}  // namespace

int64_t measure_fixed_bytes(const StableDiffusionModel& model) {
    drop_weight_pages(model);
    release_free_heap_memory();
    return process_rss_bytes();
}

std::vector<MemoryPlan> cpu_memory_plans(const StableDiffusionModel& model, int width, int height, int batch,
                                         VaeTiling tiling, int64_t fixed, const PlanExtras& extras) {
    // Streaming costs each call a pass of page faults; a decode in bands, a second run of each ResNet block's
    // first convolution (1.3x the decode on the CPU). Both are cheap next to a CPU stage, streaming the cheaper.
    std::vector<MemoryPlan> plans;
    for (bool stream : {false, true}) {
        if (tiling != VaeTiling::On) plans.push_back(make_plan(model, width, height, batch, fixed, stream, false, extras));
        if (tiling != VaeTiling::Off) plans.push_back(make_plan(model, width, height, batch, fixed, stream, true, extras));
    }
    return plans;
}

std::string budget_in_mib(int64_t peak) { return std::to_string((peak + (1 << 20) - 1) >> 20) + "M"; }

MemoryPlan choose_memory_plan(const std::vector<MemoryPlan>& plans, int64_t budget) {
    require(!plans.empty(), ErrorKind::InvalidArgument, "choose_memory_plan: no plans");
    const MemoryPlan* leanest = nullptr;
    if (const MemoryPlan* p = first_plan_within(plans, budget, leanest)) return *p;
    fail(ErrorKind::OutOfMemory, "a memory budget of " + format_mib(budget) + " is too small: the leanest plan (UNet " +
                                     "streamed, VAE decode " + (leanest->vae_tiled ? "in bands" : "whole") +
                                     ") needs about " + format_mib(leanest->peak()) + " (--memory " +
                                     budget_in_mib(leanest->peak()) + ")");
}

MemoryPlan plan_cpu_memory(const StableDiffusionModel& model, int width, int height, int batch, int64_t budget,
                           VaeTiling tiling, const PlanExtras& extras) {
    return choose_memory_plan(
        cpu_memory_plans(model, width, height, batch, tiling, measure_fixed_bytes(model), extras), budget);
}

std::string describe_unet_rows(int batch, int rows_per_image) {
    return "UNet calls: " + std::to_string(batch * rows_per_image) + " rows (" + std::to_string(rows_per_image) +
           " an image: the prompt's AND parts, and the negative with guidance)";
}

}  // namespace kiln
