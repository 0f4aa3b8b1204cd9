#include "pipeline/vram_budget.h"

#include <algorithm>

#include "kiln/error.h"
#include "pipeline/memory_plan.h"

namespace kiln {

std::string VramBudget::describe(const std::string& device) const {
    if (!automatic) return "--vram " + format_mib(bytes);
    return "--vram auto: " + format_mib(bytes) + " (" + format_mib(available) + " available on " + device +
           " less a margin of " + format_mib(margin) + ")";
}

int64_t vram_auto_margin(int64_t total_bytes) { return std::max<int64_t>(int64_t(512) << 20, total_bytes / 10); }

VramBudget vram_auto_budget(int64_t free_bytes, int64_t held_bytes, int64_t total_bytes, const std::string& device) {
    VramBudget b;
    b.automatic = true;
    b.available = std::max<int64_t>(0, free_bytes) + std::max<int64_t>(0, held_bytes);
    b.margin = vram_auto_margin(total_bytes);
    b.bytes = b.available - b.margin;
    require(b.bytes > 0, ErrorKind::OutOfMemory,
            "--vram auto: " + device + " has " + format_mib(b.available) + " available for kiln, not more than the margin of " +
                format_mib(b.margin) + " that auto leaves (give --vram SIZE to use it anyway)");
    return b;
}

VramBudget resolve_vram_budget(const std::string& text, Backend& backend) {
    if (text != "auto") {
        VramBudget b;
        b.bytes = parse_byte_size(text, "--vram");
        return b;
    }
    const DeviceMemoryInfo m = backend.memory_info();
    return vram_auto_budget(m.free, backend.reserved_bytes(), m.total, device_name(backend.device()));
}

}  // namespace kiln
