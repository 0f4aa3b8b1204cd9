// `kiln plan`.
#include "plan_command.h"

#include <cstdio>

#include "commands.h"
#include "kiln/error.h"
#include "pipeline/generate.h"
#include "pipeline/memory_plan.h"

namespace kiln::cli {

CLI::App* add_plan_command(CLI::App& app, PlanOptions& o) {
    CLI::App* cmd = app.add_subcommand(
        "plan", "how a CPU generation would hold its memory within --memory, and the predicted peak of each stage; "
        "for a GPU (--device), the budget --vram resolves to");
    cmd->add_option("-m,--model", o.model, "checkpoint: a .safetensors file or a diffusers folder")->required();
    cmd->add_option("-W,--width", o.width, "image width in pixels (default: the model's native size)");
    cmd->add_option("-H,--height", o.height, "image height in pixels (default: the model's native size)");
    cmd->add_option("--batch-size", o.batch_size, "images sampled together")->capture_default_str();
    cmd->add_option("--memory", o.memory, "SIZE (e.g. 1.6G): the budget for the process's resident memory");
    cmd->add_option("--device", o.device, "cpu, or a GPU (vulkan, cuda:1, ...: its --vram budget)")
        ->capture_default_str();
    cmd->add_option("--vram", o.vram, "SIZE or auto, as txt2img takes it: the GPU budget it resolves to");
    cmd->add_option("--vae-tiling", o.vae_tiling, "auto | on | off, as txt2img takes it")
        ->check(CLI::IsMember({"auto", "on", "off"}))
        ->capture_default_str();
    return cmd;
}

int run_plan(const PlanOptions& o) {
    const Placement placement = resolve_placement(o.device, "");
    if (!placement.device.is_cpu()) {
        require(o.memory.empty(), ErrorKind::Unsupported, "--memory bounds the memory of a CPU run; a GPU's takes --vram");
        const std::string vram = apply_vram_limit(o.vram, placement.device);
        std::printf("%s, %s: %s\n(the stages of a GPU run are not predicted yet)\n", o.model.c_str(),
                    device_name(placement.device).c_str(), vram.empty() ? "no --vram budget" : vram.c_str());
        return 0;
    }
    require(o.vram.empty(), ErrorKind::InvalidArgument, "--vram bounds a GPU's memory; a CPU run takes --memory");
    const int64_t budget = o.memory.empty() ? -1 : parse_byte_size(o.memory, "--memory");
    const VaeTiling tiling = parse_vae_tiling(o.vae_tiling);
    LoadOptions load;
    load.vae_encoder = false;
    const StableDiffusionModel model = load_model(o.model, load);
    GenerationRequest r;
    r.width = o.width.value_or(default_image_size(model));
    r.height = o.height.value_or(default_image_size(model));
    r.batch_size = o.batch_size;
    validate_request(r);
    const MemoryPlan plan = plan_cpu_memory(model, r.width, r.height, r.batch_size, budget, tiling);
    std::printf("%s %dx%d, batch %d, CPU%s:\n%s", o.model.c_str(), r.width, r.height, r.batch_size,
                budget < 0 ? ", no budget" : (", --memory " + format_mib(budget)).c_str(), plan.describe().c_str());
    return 0;
}

}  // namespace kiln::cli
