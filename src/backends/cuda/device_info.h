// What the CUDA runtime can see: one entry per device. Safe to call on any machine.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::cuda {

struct DeviceInfo {
    int index = 0;
    std::string name;
    int cc_major = 0, cc_minor = 0;  // compute capability, e.g. 9.0 for H100/H200
    uint64_t total_bytes = 0;
    uint64_t free_bytes = 0;         // at the time of the call
    int multiprocessors = 0;
};

// Every device the runtime reports. With no driver, no device, or a failing query the list is empty (or
// lacks the failing device) and *reason, when given, says why; it never throws. Reading free memory
// creates the runtime's context on each device (hundreds of MB and ~0.1 s each); the current device is
// restored afterwards.
std::vector<DeviceInfo> cuda_devices(std::string* reason = nullptr);

}  // namespace kiln::cuda
