// --device and --precision: which backend runs the model, and in which precision.
#include <cstdlib>

#include "commands.h"
#include "core/backend.h"
#include "kiln/error.h"
#include "pipeline/backend_plugins.h"
#include "pipeline/memory_plan.h"
#include "pipeline/vram_budget.h"

namespace kiln::cli {

std::string default_device() {
    const char* env = std::getenv("KILN_DEVICE");
    return env && *env ? env : "auto";
}

Placement resolve_placement(const std::string& device, const std::string& precision) {
    register_backend_plugins();
    Placement p;
    p.device = resolve_device(device);
    if (p.device.is_cpu()) {
        require(precision.empty() || precision == "fp32", ErrorKind::Unsupported,
                "--precision " + precision + ": the CPU computes in fp32 only (weights may still be 16-bit: --weights)");
        p.precision = DType::F32;
        return p;
    }
    p.precision = precision.empty() || precision == "fp16" ? DType::F16
                  : precision == "bf16"                    ? DType::BF16
                                                           : DType::F32;
    return p;
}

VramBudget apply_vram_limit(const std::string& vram, const Device& device) {
    if (vram.empty()) return VramBudget{-1};
    if (vram != "auto") (void)parse_byte_size(vram, "--vram");  // a bad size is named before anything else
    require(!device.is_cpu(), ErrorKind::InvalidArgument, "--vram bounds a GPU's memory; a CPU run takes --memory");
    Backend& backend = backend_for(device);
    const VramBudget budget = resolve_vram_budget(vram, backend);
    require(backend.set_memory_limit(budget.bytes), ErrorKind::Unsupported,
            "--vram: " + device_name(device) + " cannot cap its memory yet (CUDA and Vulkan can)");
    return budget;
}

}  // namespace kiln::cli
