#include "backends/vulkan/vulkan_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "kiln/error.h"

namespace kiln::vulkan {

namespace {

void (*exit_hook)() = nullptr;

// Idempotent: registered more than once (after the instance, after each device), it works at its first run.
void exit_handler() {
    static bool done = false;
    if (done) return;
    done = true;
    if (exit_hook) exit_hook();
    // The instance stays: destroying it unloads the driver, whose own small leaks (lavapipe's) LeakSanitizer
    // then cannot attribute to a library to suppress (.ci/lsan.supp).
}

Api load() {
    Api a;
    void* lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libvulkan.so", RTLD_NOW | RTLD_LOCAL);
    require(lib != nullptr, ErrorKind::Unsupported,
            "no Vulkan loader (libvulkan.so.1) on this machine; on Debian: apt-get install libvulkan1 "
            "mesa-vulkan-drivers");
    auto get = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
    require(get != nullptr, ErrorKind::Unsupported, "the Vulkan loader has no vkGetInstanceProcAddr");
#define KILN_VULKAN_GLOBAL(name) a.name = reinterpret_cast<PFN_##name>(get(VK_NULL_HANDLE, #name));
    KILN_VULKAN_GLOBAL_FUNCTIONS(KILN_VULKAN_GLOBAL)
#undef KILN_VULKAN_GLOBAL
    require(a.vkCreateInstance != nullptr, ErrorKind::Unsupported, "the Vulkan loader has no vkCreateInstance");
    a.instance_version = VK_API_VERSION_1_0;
    if (a.vkEnumerateInstanceVersion) a.vkEnumerateInstanceVersion(&a.instance_version);
    require(a.instance_version >= VK_API_VERSION_1_2, ErrorKind::Unsupported,
            "the Vulkan loader offers version " + std::to_string(VK_API_VERSION_MAJOR(a.instance_version)) + "." +
                std::to_string(VK_API_VERSION_MINOR(a.instance_version)) + "; kiln needs 1.2");

    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "kiln";
    app.pEngineName = "kiln";
    app.apiVersion = VK_API_VERSION_1_2;
    VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    info.pApplicationInfo = &app;
    check(a.vkCreateInstance(&info, nullptr, &a.instance), "vkCreateInstance");
#define KILN_VULKAN_INSTANCE(name)                                                   \
    a.name = reinterpret_cast<PFN_##name>(get(a.instance, #name));                   \
    require(a.name != nullptr, ErrorKind::Unsupported, "the Vulkan loader lacks " #name);
    KILN_VULKAN_INSTANCE_FUNCTIONS(KILN_VULKAN_INSTANCE)
#undef KILN_VULKAN_INSTANCE
    a.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV>(
        get(a.instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV"));
    a.vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR>(
        get(a.instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR"));
#define KILN_VULKAN_OPTIONAL(name) a.name = reinterpret_cast<PFN_##name>(get(a.instance, #name));
    KILN_VULKAN_OPTIONAL(vkGetPipelineExecutablePropertiesKHR)
    KILN_VULKAN_OPTIONAL(vkGetPipelineExecutableStatisticsKHR)
#undef KILN_VULKAN_OPTIONAL
    // Registered after the driver's own handlers (made while the instance was), so it runs before them.
    std::atexit(exit_handler);
    return a;  // the instance and the library stay for the process: devices may be used until exit
}

}  // namespace

const Api& api() {
    // Not std::call_once: a failed load is retried (and reported again) at the next call, never cached as a
    // half-made table.
    static std::mutex mutex;
    static Api loaded;
    static bool ready = false;
    std::lock_guard lock(mutex);
    if (!ready) {
        loaded = load();
        ready = true;
    }
    return loaded;
}

void at_exit_before_drivers(void (*hook)()) {
    exit_hook = hook;
    std::atexit(exit_handler);  // after whatever the driver registered so far (device creation included)
}

std::string result_name(VkResult r) {
    switch (r) {
#define KILN_VK_RESULT(name) \
    case name:               \
        return #name;
        KILN_VK_RESULT(VK_SUCCESS)
        KILN_VK_RESULT(VK_NOT_READY)
        KILN_VK_RESULT(VK_TIMEOUT)
        KILN_VK_RESULT(VK_INCOMPLETE)
        KILN_VK_RESULT(VK_ERROR_OUT_OF_HOST_MEMORY)
        KILN_VK_RESULT(VK_ERROR_OUT_OF_DEVICE_MEMORY)
        KILN_VK_RESULT(VK_ERROR_INITIALIZATION_FAILED)
        KILN_VK_RESULT(VK_ERROR_DEVICE_LOST)
        KILN_VK_RESULT(VK_ERROR_MEMORY_MAP_FAILED)
        KILN_VK_RESULT(VK_ERROR_LAYER_NOT_PRESENT)
        KILN_VK_RESULT(VK_ERROR_EXTENSION_NOT_PRESENT)
        KILN_VK_RESULT(VK_ERROR_FEATURE_NOT_PRESENT)
        KILN_VK_RESULT(VK_ERROR_INCOMPATIBLE_DRIVER)
        KILN_VK_RESULT(VK_ERROR_TOO_MANY_OBJECTS)
        KILN_VK_RESULT(VK_ERROR_FORMAT_NOT_SUPPORTED)
        KILN_VK_RESULT(VK_ERROR_FRAGMENTED_POOL)
        KILN_VK_RESULT(VK_ERROR_OUT_OF_POOL_MEMORY)
        KILN_VK_RESULT(VK_ERROR_INVALID_EXTERNAL_HANDLE)
        KILN_VK_RESULT(VK_ERROR_FRAGMENTATION)
        KILN_VK_RESULT(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
        KILN_VK_RESULT(VK_ERROR_UNKNOWN)
#undef KILN_VK_RESULT
        default:
            return "VkResult " + std::to_string(static_cast<int>(r));
    }
}

void check(VkResult r, const std::string& what) {
    if (r == VK_SUCCESS) return;
    const bool oom = r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY;
    fail(oom ? ErrorKind::OutOfMemory : ErrorKind::Unsupported, "vulkan: " + what + " failed: " + result_name(r));
}

}  // namespace kiln::vulkan
