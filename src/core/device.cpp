#include "core/device.h"

#include <cctype>

#include "kiln/error.h"

namespace kiln {

std::string device_name(const Device& d) {
    return d.kind == DeviceKind::Cpu ? "cpu" : "cuda:" + std::to_string(d.index);
}

Device parse_device(const std::string& text) {
    if (text == "cpu") return {};
    if (text == "cuda") return {DeviceKind::Cuda, 0};
    const std::string prefix = "cuda:";
    if (text.rfind(prefix, 0) == 0 && text.size() > prefix.size() && text.size() <= prefix.size() + 3) {
        int index = 0;
        for (size_t i = prefix.size(); i < text.size(); ++i) {
            if (!std::isdigit(static_cast<unsigned char>(text[i]))) index = -1;
            if (index >= 0) index = index * 10 + (text[i] - '0');
        }
        if (index >= 0) return {DeviceKind::Cuda, index};
    }
    fail(ErrorKind::InvalidArgument, "unknown device '" + text + "' (cpu, cuda, cuda:N or auto)");
}

}  // namespace kiln
