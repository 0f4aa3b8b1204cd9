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
    bool matrix_products = false;         // kiln's fp16 products on matrix units run here (gemm_coop.glsl)
    uint32_t device_local_heap = 0;       // the largest device-local heap
    uint64_t heap_bytes = 0;              // its size
};

// Usable devices; why collects why the others (or all) are not.
std::vector<PhysicalDevice> physical_devices(std::string* why);

// Free and total bytes of the device's main heap: the driver's budget when VK_EXT_memory_budget is there,
// else the heap's size minus what kiln holds (held_bytes).
DeviceMemoryInfo heap_memory(const PhysicalDevice& d, int64_t held_bytes);

// For kiln info --devices: name, type, API version, subgroup size, fp16, memory.
DeviceDescription describe(const PhysicalDevice& d, int index, int64_t held_bytes);

}  // namespace kiln::vulkan
