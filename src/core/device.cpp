#include "core/device.h"

#include <cctype>

#include "kiln/error.h"

namespace kiln {

const char* device_kind_name(DeviceKind k) {
    return k == DeviceKind::Cpu ? "cpu" : k == DeviceKind::Cuda ? "cuda" : "vulkan";
}

std::string device_name(const Device& d) {
    return d.is_cpu() ? "cpu" : std::string(device_kind_name(d.kind)) + ":" + std::to_string(d.index);
}

Device parse_device(const std::string& text) {
    if (text == "cpu") return {};
    for (DeviceKind kind : {DeviceKind::Cuda, DeviceKind::Vulkan}) {
        const std::string name = device_kind_name(kind), prefix = name + ":";
        if (text == name) return {kind, 0};
        if (text.rfind(prefix, 0) == 0 && text.size() > prefix.size() && text.size() <= prefix.size() + 3) {
            int index = 0;
            for (size_t i = prefix.size(); i < text.size(); ++i) {
                if (!std::isdigit(static_cast<unsigned char>(text[i]))) index = -1;
                if (index >= 0) index = index * 10 + (text[i] - '0');
            }
            if (index >= 0) return {kind, index};
        }
    }
    fail(ErrorKind::InvalidArgument, "unknown device '" + text + "' (cpu, cuda, cuda:N, vulkan, vulkan:N or auto)");
}

}  // namespace kiln
