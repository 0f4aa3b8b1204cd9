// The Vulkan functions kiln calls, loaded at run time from the loader (libvulkan.so.1) rather than linked:
// a kiln built with Vulkan still starts, and runs on the CPU or CUDA, where no loader is installed; only
// asking for a Vulkan device then fails, with a line saying the loader is missing.
#pragma once
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <string>

// VK_KHR_cooperative_matrix came with Vulkan headers 1.3.255; Debian 12's are 1.3.239. Where the headers
// lack it, the few names kiln uses are declared here as the Vulkan registry defines them (the extension's
// number is 507, so its structure types are 1000506000 + n).
#ifndef VK_KHR_cooperative_matrix
#define VK_KHR_cooperative_matrix 1
typedef enum VkComponentTypeKHR {
    VK_COMPONENT_TYPE_FLOAT16_KHR = 0,
    VK_COMPONENT_TYPE_FLOAT32_KHR = 1,
    VK_COMPONENT_TYPE_MAX_ENUM_KHR = 0x7FFFFFFF
} VkComponentTypeKHR;
typedef enum VkScopeKHR {
    VK_SCOPE_DEVICE_KHR = 1,
    VK_SCOPE_WORKGROUP_KHR = 2,
    VK_SCOPE_SUBGROUP_KHR = 3,
    VK_SCOPE_QUEUE_FAMILY_KHR = 5,
    VK_SCOPE_MAX_ENUM_KHR = 0x7FFFFFFF
} VkScopeKHR;
typedef struct VkCooperativeMatrixPropertiesKHR {
    VkStructureType sType;
    void* pNext;
    uint32_t MSize;
    uint32_t NSize;
    uint32_t KSize;
    VkComponentTypeKHR AType;
    VkComponentTypeKHR BType;
    VkComponentTypeKHR CType;
    VkComponentTypeKHR ResultType;
    VkBool32 saturatingAccumulation;
    VkScopeKHR scope;
} VkCooperativeMatrixPropertiesKHR;
typedef struct VkPhysicalDeviceCooperativeMatrixFeaturesKHR {
    VkStructureType sType;
    void* pNext;
    VkBool32 cooperativeMatrix;
    VkBool32 cooperativeMatrixRobustBufferAccess;
} VkPhysicalDeviceCooperativeMatrixFeaturesKHR;
typedef VkResult(VKAPI_PTR* PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)(
    VkPhysicalDevice physicalDevice, uint32_t* pPropertyCount, VkCooperativeMatrixPropertiesKHR* pProperties);
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR ((VkStructureType)1000506000)
#define VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR ((VkStructureType)1000506001)
#endif

namespace kiln::vulkan {

// Functions of the loader itself, then of an instance, then of a device (all resolved through the
// instance: one table serves every device, at the cost of one indirection per call).
#define KILN_VULKAN_GLOBAL_FUNCTIONS(X) \
    X(vkCreateInstance)                 \
    X(vkEnumerateInstanceVersion)
#define KILN_VULKAN_INSTANCE_FUNCTIONS(X)        \
    X(vkDestroyInstance)                         \
    X(vkEnumeratePhysicalDevices)                \
    X(vkGetPhysicalDeviceProperties)             \
    X(vkGetPhysicalDeviceProperties2)            \
    X(vkGetPhysicalDeviceFeatures2)              \
    X(vkGetPhysicalDeviceMemoryProperties)       \
    X(vkGetPhysicalDeviceMemoryProperties2)      \
    X(vkGetPhysicalDeviceQueueFamilyProperties)  \
    X(vkEnumerateDeviceExtensionProperties)      \
    X(vkCreateDevice)                            \
    X(vkDestroyDevice)                           \
    X(vkDeviceWaitIdle)                          \
    X(vkGetDeviceQueue)                          \
    X(vkQueueSubmit)                             \
    X(vkCreateCommandPool)                       \
    X(vkDestroyCommandPool)                      \
    X(vkAllocateCommandBuffers)                  \
    X(vkFreeCommandBuffers)                      \
    X(vkBeginCommandBuffer)                      \
    X(vkEndCommandBuffer)                        \
    X(vkResetCommandBuffer)                      \
    X(vkCreateFence)                             \
    X(vkDestroyFence)                            \
    X(vkWaitForFences)                           \
    X(vkResetFences)                             \
    X(vkCreateSemaphore)                         \
    X(vkDestroySemaphore)                        \
    X(vkGetSemaphoreCounterValue)                \
    X(vkAllocateMemory)                          \
    X(vkFreeMemory)                              \
    X(vkMapMemory)                               \
    X(vkUnmapMemory)                             \
    X(vkCreateBuffer)                            \
    X(vkDestroyBuffer)                           \
    X(vkGetBufferMemoryRequirements)             \
    X(vkBindBufferMemory)                        \
    X(vkGetBufferDeviceAddress)                  \
    X(vkCreateShaderModule)                      \
    X(vkDestroyShaderModule)                     \
    X(vkCreatePipelineLayout)                    \
    X(vkDestroyPipelineLayout)                   \
    X(vkCreatePipelineCache)                     \
    X(vkGetPipelineCacheData)                    \
    X(vkDestroyPipelineCache)                    \
    X(vkCreateComputePipelines)                  \
    X(vkDestroyPipeline)                         \
    X(vkCmdBindPipeline)                         \
    X(vkCmdPushConstants)                        \
    X(vkCmdDispatch)                             \
    X(vkCmdCopyBuffer)                           \
    X(vkCmdPipelineBarrier)                      \
    X(vkCreateQueryPool)                         \
    X(vkDestroyQueryPool)                        \
    X(vkCmdResetQueryPool)                       \
    X(vkCmdWriteTimestamp)                       \
    X(vkGetQueryPoolResults)

struct Api {
#define KILN_VULKAN_MEMBER(name) PFN_##name name = nullptr;
    KILN_VULKAN_GLOBAL_FUNCTIONS(KILN_VULKAN_MEMBER)
    KILN_VULKAN_INSTANCE_FUNCTIONS(KILN_VULKAN_MEMBER)
#undef KILN_VULKAN_MEMBER
    // Of an extension: null where the loader does not know it.
    PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV vkGetPhysicalDeviceCooperativeMatrixPropertiesNV = nullptr;
    PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR = nullptr;
    PFN_vkGetPipelineExecutablePropertiesKHR vkGetPipelineExecutablePropertiesKHR = nullptr;
    PFN_vkGetPipelineExecutableStatisticsKHR vkGetPipelineExecutableStatisticsKHR = nullptr;
    VkInstance instance = VK_NULL_HANDLE;
    uint32_t instance_version = 0;
};

// The loader and kiln's instance (Vulkan 1.2), made on first use and kept for the process. No loader, or an
// instance that cannot be made: Unsupported naming why.
const Api& api();

// At exit, before the drivers tear themselves down (in atexit handlers registered while the instance or a
// device was made, which run after kiln's, registered later; call this after making a device): runs `hook`
// (the factory's: destroy the Vulkan backends). Without it the backends, static storage, would be destroyed after the
// driver (a crash on NVIDIA's) or never (leaks under LeakSanitizer).
void at_exit_before_drivers(void (*hook)());

// "VK_ERROR_OUT_OF_DEVICE_MEMORY", ...
std::string result_name(VkResult r);
// Throws for r != VK_SUCCESS: OutOfMemory for the out-of-memory results, Unsupported otherwise, naming what.
void check(VkResult r, const std::string& what);

}  // namespace kiln::vulkan
