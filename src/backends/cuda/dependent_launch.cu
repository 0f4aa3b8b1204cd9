// Whether kernels go out as programmatic dependent launches (kernel_common.cuh's launch_dependent): on devices
// of compute capability 9.0 or later, unless KILN_CUDA_PDL=0 (for comparisons). Asked once per device.
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "backends/cuda/kernel_common.cuh"

namespace kiln::cuda::detail {

bool dependent_launch_supported() {
#if defined(KILN_HIP)
    return false;
#else
    static std::mutex mutex;
    static std::map<int, bool> known;
    int device = 0;
    KILN_CUDA_CHECK(cudaGetDevice(&device));
    std::lock_guard<std::mutex> lock(mutex);
    const auto it = known.find(device);
    if (it != known.end()) return it->second;
    int major = 0;
    KILN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    const char* setting = std::getenv("KILN_CUDA_PDL");
    const bool on = major >= 9 && !(setting && std::strcmp(setting, "0") == 0);
    known[device] = on;
    return on;
#endif
}

}  // namespace kiln::cuda::detail
