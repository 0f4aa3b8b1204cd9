// `kiln plan`.
#include "plan_command.h"

#include <cstdio>
#include <functional>
#include <string>

#include "kiln/error.h"
#include "pipeline/generate.h"
#include "pipeline/conditioning.h"
#include "pipeline/gpu_memory_plan.h"
#include "pipeline/lora_memory.h"
#include "pipeline/lora_selection.h"
#include "pipeline/memory_plan.h"
#include "pipeline/upload_rate.h"
#include "pipeline/vram_budget.h"
#include "commands.h"
#include "core/backend.h"

namespace kiln::cli {

namespace {

// The time a plan's uploads take at `rate` bytes a second, for kiln plan: an upper bound where the copies wait
// for nothing else, more than a streamed UNet pays where its blocks' copies overlap the work (fetched ahead).
std::string describe_upload_time(const GpuMemoryPlan& plan, double rate) {
    if (rate <= 0) return "";
    char line[320];
    const double per_call = double(plan.uploads_per_unet_call) / rate * 1e3;
    std::snprintf(line, sizeof line, "  at %.1f GB/s (a 32 MiB upload timed now): %.0f ms each generation%s\n",
                  rate / 1e9, double(plan.uploads_per_generation) / rate * 1e3,
                  plan.uploads_per_unet_call == 0
                      ? ""
                      : (", " + std::to_string(int64_t(per_call + 0.5)) +
                         " ms each UNet call (less where the copies overlap the work: a block's are fetched while "
                         "the one before runs)").c_str());
    return line;
}

}  // namespace

CLI::App* add_plan_command(CLI::App& app, PlanOptions& o) {
    CLI::App* cmd = app.add_subcommand(
        "plan", "how a generation would hold its memory within --memory (CPU) or --vram (GPU), the predicted peak "
                "of each stage, and the largest batch that fits");
    cmd->add_option("-m,--model", o.model, "checkpoint: a .safetensors file or a diffusers folder")->required();
    cmd->add_option("-W,--width", o.width, "image width in pixels (default: the model's native size)");
    cmd->add_option("-H,--height", o.height, "image height in pixels (default: the model's native size)");
    cmd->add_option("--batch-size", o.batch_size, "images sampled together")->capture_default_str();
    cmd->add_option("--memory", o.memory, "SIZE (e.g. 1.6G): the budget for a CPU run's resident memory");
    cmd->add_option("--vram", o.vram, "SIZE (e.g. 1G) or auto: the budget for kiln's device memory on a GPU (--device)");
    cmd->add_option("--device", o.device, "cpu (the default here), cuda, cuda:N, vulkan, vulkan:N or auto")
        ->capture_default_str();
    cmd->add_option("--precision", o.precision, "fp16 | bf16 | fp32 on a GPU, as txt2img takes it")
        ->check(CLI::IsMember({"fp16", "bf16", "fp32"}));
    cmd->add_option("--vae-tiling", o.vae_tiling, "auto | on | off, as txt2img takes it")
        ->check(CLI::IsMember({"auto", "on", "off"}))
        ->capture_default_str();
    cmd->add_option("-p,--prompt", o.prompt, "the prompt (its AND parts and <lora:...> tags count)");
    cmd->add_option("--cfg-scale", o.cfg_scale, "guidance scale (1 or less: no negative row)")->capture_default_str();
    cmd->add_option("--prompt-syntax", o.prompt_syntax, "a1111 | none")
        ->check(CLI::IsMember({"a1111", "none"}))
        ->capture_default_str();
    cmd->add_option("--lora", o.loras, "FILE[:WEIGHT]: a LoRA file to count (repeatable)");
    cmd->add_option("--lora-dir", o.lora_dir, "where the prompt's <lora:NAME:W> tags find NAME.safetensors");
    cmd->add_option("--unet", o.unet, "FILE: the UNet from this file, as txt2img takes it");
    cmd->add_option("--weights", o.weights, std::string(kWeightsHelp) + "; as txt2img takes it")
        ->check(CLI::IsMember(weights_choices()));
    return cmd;
}

int run_plan(const PlanOptions& o) {
    const VaeTiling tiling = parse_vae_tiling(o.vae_tiling);
    const Placement placement = resolve_placement(o.device, o.precision);
    const bool gpu = !placement.device.is_cpu();
    require(gpu || o.vram.empty(), ErrorKind::InvalidArgument, "--vram bounds a GPU's memory (name one with --device); a CPU run takes --memory");
    require(!gpu || o.memory.empty(), ErrorKind::InvalidArgument, "--memory plans a CPU run; a GPU's takes --vram");
    int64_t budget = o.memory.empty() ? -1 : parse_byte_size(o.memory, "--memory");
    if (gpu && !o.vram.empty()) {  // auto: what the device has free now (pipeline/vram_budget.h)
        const VramBudget vram = resolve_vram_budget(o.vram, backend_for(placement.device));
        if (vram.automatic) std::printf("%s\n", vram.describe(device_name(placement.device)).c_str());
        budget = vram.bytes;
    }
    LoadOptions load;
    load.vae_encoder = false;
    load.device = placement.device;
    load.precision = placement.precision;
    load.offload_weights = gpu;  // only their sizes are needed: none stays on the device
    load.unet_path = o.unet;
    load.weights = weights_option(o.weights);
    // The LoRA files as txt2img finds them, not merged: the plan adds their copies (pipeline/lora_memory.h).
    GenerationRequest r;
    r.prompt = o.prompt;
    r.cfg_scale = static_cast<float>(o.cfg_scale);
    r.prompt_syntax = parse_prompt_syntax(o.prompt_syntax);
    r.batch_size = o.batch_size;
    std::vector<LoraApplication> loras;
    if (r.prompt_syntax == PromptSyntax::A1111) loras = loras_from_prompt(r.prompt, o.lora_dir);
    for (const std::string& arg : o.loras) loras.push_back(lora_from_argument(arg));
    const StableDiffusionModel model = load_model(o.model, load);
    r.width = o.width.value_or(default_image_size(model));
    r.height = o.height.value_or(default_image_size(model));
    validate_request(r);
    PlanExtras extras;
    extras.unet_rows_per_image = unet_rows_per_image(r.prompt, r.prompt_syntax, r.cfg_scale > 1.0f);
    extras.unmerged_loras = estimate_lora_merge(model, loras);
    const std::string where = gpu ? device_name(placement.device) : "CPU";
    const std::string limit = budget < 0 ? ", no budget" : (gpu ? ", --vram " : ", --memory ") + format_mib(budget);
    std::string described;
    std::function<bool(int)> fits;  // whether some plan for a batch of that many fits the budget
    if (gpu) {
        const GpuMemoryPlan chosen = plan_gpu_memory(model, r.width, r.height, r.batch_size, budget, tiling, extras);
        described = chosen.describe();
        if (chosen.uploads_per_generation > 0 || chosen.uploads_per_unet_call > 0)
            described += describe_upload_time(chosen, measure_upload_rate(backend_for(placement.device)));
        fits = [&](int batch) {
            const GpuMemoryPlan* leanest = nullptr;
            return first_plan_within(gpu_memory_plans(model, r.width, r.height, batch, tiling, extras), budget,
                                     leanest) != nullptr;
        };
    } else {
        described = plan_cpu_memory(model, r.width, r.height, r.batch_size, budget, tiling, extras).describe();
        const int64_t fixed = measure_fixed_bytes(model);
        fits = [&, fixed](int batch) {
            const MemoryPlan* leanest = nullptr;
            return first_plan_within(cpu_memory_plans(model, r.width, r.height, batch, tiling, fixed, extras), budget,
                                     leanest) != nullptr;
        };
    }
    std::printf("%s %dx%d, batch %d, %s%s:\n%s", o.model.c_str(), r.width, r.height, r.batch_size, where.c_str(),
                limit.c_str(), described.c_str());
    if (budget >= 0) {
        int largest = 0;  // peaks grow with the batch: the first that does not fit ends the search
        while (largest < 64 && fits(largest + 1)) ++largest;
        std::printf("  largest batch that fits %s: %d%s\n", format_mib(budget).c_str(), largest,
                    largest == 64 ? " (kiln's limit)" : "");
    }
    if (gpu)
        std::printf("  (kiln's own allocations; the driver's context and libraries come on top: docs/MEMORY.md)\n");
    return 0;
}

}  // namespace kiln::cli
