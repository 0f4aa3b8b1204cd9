// The Vulkan devices kiln can use, in the order --device vulkan:N numbers them: discrete GPUs first, then
// integrated, virtual and CPU implementations (lavapipe), each group in the loader's order. A device is
// usable when it has Vulkan 1.2, buffer device addresses and a compute queue; fp16 storage is optional.
#pragma once
#include <string>
#include <vector>

#include "backends/vulkan/vulkan_api.h"
#include "core/backend.h"

namespace kiln::vulkan {

struct PhysicalDevice {
    VkPhysicalDevice handle = VK_NULL_HANDLE;
    VkPhysicalDeviceProperties properties{};
    uint32_t queue_family = 0;            // a queue family with compute
    bool fp16_storage = false;            // storageBuffer16BitAccess: float16 tensors
    bool memory_budget = false;           // VK_EXT_memory_budget: the driver's free-memory figure
    bool cooperative_matrix = false;      // VK_NV_cooperative_matrix or VK_KHR_cooperative_matrix offered
    bool cooperative_matrix_khr = false;  // VK_KHR_cooperative_matrix offered
    bool matrix_products = false;         // kiln's fp16 products on matrix units run here (gemm_coop.glsl)
    bool matrix_off = false;              // KILN_VULKAN_MATRIX=off left any matrix units unused
    bool matrix_khr = false;              // ... through VK_KHR_cooperative_matrix (else VK_NV_cooperative_matrix)
    // The matrix kernels' pipelines ask for 32-wide subgroups (VK_EXT_subgroup_size_control), which gemm_coop.glsl
    // assumes: where the driver's default differs (RDNA's wave64) and wherever the device can be asked.
    bool matrix_subgroup_32 = false;
    // KILN_VULKAN_STATS=1 and VK_KHR_pipeline_executable_properties: pipelines' statistics printed (vulkan_kernels.cpp)
    bool statistics = false;
    uint32_t device_local_heap = 0;       // the largest device-local heap
    uint64_t heap_bytes = 0;              // its size
    // The driver's limits on one allocation: maxMemoryAllocationSize (Vulkan 1.1, from maintenance3) and, where
    // VK_KHR_maintenance4 is offered, maxBufferSize (each of kiln's allocations is one buffer); 0: none stated.
    uint64_t max_allocation = 0;
};

// The developer setting KILN_VULKAN_MATRIX: "khr" or "nv" limits the matrix units to that extension (to compare
// them on a device that has both), "off" leaves them unused (the device then runs as one without them: the FMA
// tiles, the FMA flash kernel), "" (unset) takes KHR where this build has its kernels, else NV; another value
// is an InvalidArgument naming it.
std::string matrix_extension_from_env(const char* value);

// Whether the device's VK_KHR_cooperative_matrix offers 16x16x16 float16 products with float16 sums (the
// "f16acc" tile under measurement, gemm_coop.glsl).
bool khr_float16_sums(const PhysicalDevice& d);

// Usable devices; why collects why the others (or all) are not.
std::vector<PhysicalDevice> physical_devices(std::string* why);

// Free and total bytes of the device's main heap: the driver's budget when VK_EXT_memory_budget is there,
// else the heap's size minus what kiln holds (held_bytes).
DeviceMemoryInfo heap_memory(const PhysicalDevice& d, int64_t held_bytes);

// For kiln info --devices: name, type, API version, subgroup size, fp16, memory.
DeviceDescription describe(const PhysicalDevice& d, int index, int64_t held_bytes);

}  // namespace kiln::vulkan
