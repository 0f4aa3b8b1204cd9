// Where a tensor lives and where ops run: the host ("cpu") or a numbered GPU ("cuda:0", "vulkan:1"). Parsed from the
// command line's --device; "auto" is resolved by the backend registry (core/backend.h), not here.
#pragma once
#include <string>

namespace kiln {

enum class DeviceKind { Cpu, Cuda, Vulkan };

struct Device {
    DeviceKind kind = DeviceKind::Cpu;
    int index = 0;  // which GPU of its kind; 0 for the host
    bool operator==(const Device&) const = default;
    bool is_cpu() const { return kind == DeviceKind::Cpu; }
};

// "cpu", "cuda", "vulkan"
const char* device_kind_name(DeviceKind kind);
// "cpu", "cuda:0", "vulkan:0", ...
std::string device_name(const Device& d);
// "cpu", "cuda" / "vulkan" (index 0) or "cuda:N" / "vulkan:N"; anything else is InvalidArgument naming the text.
Device parse_device(const std::string& text);

}  // namespace kiln
