#include "backends/cuda/device_info.h"

#include "backends/cuda/gpu_runtime.h"

namespace kiln::cuda {

namespace {
std::string describe(cudaError_t err) { return std::string(cudaGetErrorName(err)) + " (" + cudaGetErrorString(err) + ")"; }
}  // namespace

std::vector<DeviceInfo> cuda_devices(std::string* reason) {
    std::vector<DeviceInfo> devices;
    std::string why;
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();  // clear it, so that it does not surface at an unrelated later call
        why = "cudaGetDeviceCount: " + describe(err);
        count = 0;
    } else if (count == 0) {
        why = "the CUDA runtime reports no device";
    }
    int previous = -1;
    if (count > 0 && cudaGetDevice(&previous) != cudaSuccess) previous = -1;
    for (int i = 0; i < count; ++i) {
        cudaDeviceProp prop{};
        if ((err = cudaGetDeviceProperties(&prop, i)) != cudaSuccess) {
            (void)cudaGetLastError();
            why += (why.empty() ? "" : "; ") + ("device " + std::to_string(i) + ": cudaGetDeviceProperties: " + describe(err));
            continue;
        }
        DeviceInfo info;
        info.index = i;
        info.name = prop.name;
        info.cc_major = prop.major;
        info.cc_minor = prop.minor;
        info.total_bytes = prop.totalGlobalMem;
        info.multiprocessors = prop.multiProcessorCount;
        size_t free_b = 0, total_b = 0;
        if ((err = cudaSetDevice(i)) == cudaSuccess && (err = cudaMemGetInfo(&free_b, &total_b)) == cudaSuccess) {
            info.free_bytes = free_b;
            info.total_bytes = total_b;
        } else {
            (void)cudaGetLastError();
            why += (why.empty() ? "" : "; ") + ("device " + std::to_string(i) + ": cudaMemGetInfo: " + describe(err));
            continue;
        }
        devices.push_back(info);
    }
    if (previous >= 0) (void)cudaSetDevice(previous);
    if (reason) *reason = why;
    return devices;
}

}  // namespace kiln::cuda
