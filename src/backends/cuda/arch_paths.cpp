#include "backends/cuda/arch_paths.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <mutex>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/gpu_runtime.h"
#include "kiln/error.h"

namespace kiln::cuda {

namespace {
// cudaDevAttrMaxSharedMemoryPerBlockOptin of each architecture (CUDA C++ Programming Guide, "Technical
// Specifications per Compute Capability"): a forced lower capability also gets its smaller shared memory.
int shared_per_block(int capability) {
    if (capability < 80) return 64 * 1024;
    if (capability == 80 || capability == 87) return 163 * 1024;
    if (capability < 90 || capability >= 120) return 99 * 1024;  // 8.6, 8.9; consumer Blackwell 12.x
    return 227 * 1024;                                            // 9.0, 10.x
}
}  // namespace

ArchPaths arch_paths(int capability) {
    ArchPaths p;
    p.capability = capability;
    p.flash_attention = p.cudnn_attention = p.bf16 = p.tf32 = p.int8_mma = capability >= 80;
    p.fp8_mma = capability >= 89;
    p.dependent_launch = p.tma = capability >= 90;
    p.max_shared_per_block = shared_per_block(capability);
    return p;
}

std::string capability_name(int capability) {
    return std::to_string(capability / 10) + "." + std::to_string(capability % 10);
}

int chosen_capability(int real, const char* setting) {
    if (!setting || !*setting) return real;
    const std::string s = setting;
    std::string digits = s.rfind("sm_", 0) == 0 ? s.substr(3) : s;
    if (digits.size() >= 3 && digits[digits.size() - 2] == '.') digits.erase(digits.size() - 2, 1);  // 8.6, 10.0
    bool ok = digits.size() == 2 || digits.size() == 3;
    for (char ch : digits) ok = ok && std::isdigit(static_cast<unsigned char>(ch));
    if (!ok)
        fail(ErrorKind::InvalidArgument,
             "KILN_CUDA_ARCH=" + s + ": a compute capability such as 75, 80, 86, 89 or 90 (or 8.6, sm_86)");
    const int cc = std::atoi(digits.c_str());
    if (cc < kLowestCapability)
        fail(ErrorKind::InvalidArgument, "KILN_CUDA_ARCH=" + s + ": kiln's CUDA backend needs compute capability " +
                                             capability_name(kLowestCapability) + " or later");
    if (cc > real)
        fail(ErrorKind::InvalidArgument, "KILN_CUDA_ARCH=" + s + " is above this GPU's compute capability " +
                                             capability_name(real) + " (the setting only lowers it)");
    return cc;
}

const ArchPaths& device_arch_paths(int device) {
    static std::mutex mutex;
    static std::map<int, ArchPaths> known;
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = known.find(device); it != known.end()) return it->second;
#if defined(KILN_HIP)
    ArchPaths paths;  // AMD GPUs: none of the NVIDIA paths (HIP builds keep to float32 and float16)
    KILN_CUDA_CHECK(cudaDeviceGetAttribute(&paths.max_shared_per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
#else
    int major = 0, minor = 0, shared = 0;
    KILN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    KILN_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    KILN_CUDA_CHECK(cudaDeviceGetAttribute(&shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    const int real = major * 10 + minor;
    if (real < kLowestCapability)
        fail(ErrorKind::Unsupported, "cuda:" + std::to_string(device) + " has compute capability " +
                                         capability_name(real) + "; kiln's CUDA backend needs " +
                                         capability_name(kLowestCapability) +
                                         " (Turing) or later: use --device vulkan or --device cpu");
    const int chosen = chosen_capability(real, std::getenv("KILN_CUDA_ARCH"));
    ArchPaths paths = arch_paths(chosen);
    // The device's own figure, or under the override the smaller of the two.
    paths.max_shared_per_block = chosen == real ? shared : std::min(paths.max_shared_per_block, shared);
#endif
    return known.emplace(device, paths).first->second;
}

}  // namespace kiln::cuda
