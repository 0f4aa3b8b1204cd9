#include "backends/vulkan/physical_devices.h"

#include "backends/vulkan/spirv_table.h"
#include "kiln/error.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace kiln::vulkan {

namespace {

int type_rank(VkPhysicalDeviceType t) {
    switch (t) {
        case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
        case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
        case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
        case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
        default: return 4;
    }
}

const char* type_name(VkPhysicalDeviceType t) {
    switch (t) {
        case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
        case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
        case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
        case VK_PHYSICAL_DEVICE_TYPE_CPU: return "runs on the CPU";
        default: return "other";
    }
}

bool has_extension(const Api& a, VkPhysicalDevice d, const char* name) {
    uint32_t n = 0;
    a.vkEnumerateDeviceExtensionProperties(d, nullptr, &n, nullptr);
    std::vector<VkExtensionProperties> ext(n);
    a.vkEnumerateDeviceExtensionProperties(d, nullptr, &n, ext.data());
    for (const VkExtensionProperties& e : ext)
        if (std::strcmp(e.extensionName, name) == 0) return true;
    return false;
}

// gemm_coop.glsl needs 16x16x16 float16 products summed in float32 at subgroup scope, 32-wide subgroups (it
// splits 256 threads into 8 of them), float16 arithmetic types and the Vulkan memory model (its matrix scopes),
// through VK_KHR_cooperative_matrix where this build has the shaders for it (compiled by glslang 13 or later:
// kernels.cmake), else through VK_NV_cooperative_matrix. A device whose default subgroup is not 32 wide
// qualifies when VK_EXT_subgroup_size_control lets kiln ask for 32 in compute shaders.
struct MatrixUnits {
    bool products = false, khr = false, subgroup_32 = false;
    bool off = false;  // KILN_VULKAN_MATRIX=off
};

// sums: the accumulators' type, float32 for gemm_coop.glsl (float16 for a variant under measurement).
bool khr_shape(const Api& a, VkPhysicalDevice h, VkComponentTypeKHR sums = VK_COMPONENT_TYPE_FLOAT32_KHR) {
    if (!a.vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR) return false;
    uint32_t n = 0;
    if (a.vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR(h, &n, nullptr) != VK_SUCCESS) return false;
    std::vector<VkCooperativeMatrixPropertiesKHR> shapes(n, {VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR});
    if (a.vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR(h, &n, shapes.data()) != VK_SUCCESS) return false;
    for (const VkCooperativeMatrixPropertiesKHR& m : shapes)
        if (m.MSize == 16 && m.NSize == 16 && m.KSize == 16 && m.AType == VK_COMPONENT_TYPE_FLOAT16_KHR &&
            m.BType == VK_COMPONENT_TYPE_FLOAT16_KHR && m.CType == sums &&
            m.ResultType == sums && m.scope == VK_SCOPE_SUBGROUP_KHR && !m.saturatingAccumulation)
            return true;
    return false;
}

bool nv_shape(const Api& a, VkPhysicalDevice h) {
    if (!a.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV) return false;
    uint32_t n = 0;
    a.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(h, &n, nullptr);
    std::vector<VkCooperativeMatrixPropertiesNV> shapes(n, {VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV});
    a.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(h, &n, shapes.data());
    for (const VkCooperativeMatrixPropertiesNV& m : shapes)
        if (m.MSize == 16 && m.NSize == 16 && m.KSize == 16 && m.AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
            m.BType == VK_COMPONENT_TYPE_FLOAT16_NV && m.CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
            m.DType == VK_COMPONENT_TYPE_FLOAT32_NV && m.scope == VK_SCOPE_SUBGROUP_NV)
            return true;
    return false;
}

MatrixUnits matrix_units(const Api& a, VkPhysicalDevice h, bool fp16_storage) {
    MatrixUnits out;
    if (!fp16_storage) return out;
    const std::string only = matrix_extension_from_env(std::getenv("KILN_VULKAN_MATRIX"));
    out.off = only == "off";
    if (out.off) return out;  // as a GPU without matrix units (the RX 580 proxy, docs/VULKAN.md)
    const bool khr = only != "nv" && has_extension(a, h, "VK_KHR_cooperative_matrix") && embedded_kernel("matmul_coopk_f16");
    const bool nv = only != "khr" && has_extension(a, h, "VK_NV_cooperative_matrix");
    if (!khr && !nv) return out;
    const bool size_control = has_extension(a, h, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR coop_khr{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
    VkPhysicalDeviceCooperativeMatrixFeaturesNV coop_nv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
    VkPhysicalDeviceSubgroupSizeControlFeaturesEXT control{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT};
    VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    void** next = &f12.pNext;  // chain only the structures of extensions the device has
    if (khr) *next = &coop_khr, next = &coop_khr.pNext;
    if (nv) *next = &coop_nv, next = &coop_nv.pNext;
    if (size_control) *next = &control;
    VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    features.pNext = &f12;
    a.vkGetPhysicalDeviceFeatures2(h, &features);
    if (!f12.shaderFloat16 || !f12.vulkanMemoryModel) return out;
    VkPhysicalDeviceSubgroupSizeControlPropertiesEXT sizes{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES_EXT};
    VkPhysicalDeviceSubgroupProperties subgroup{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    if (size_control) subgroup.pNext = &sizes;
    VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    props.pNext = &subgroup;
    a.vkGetPhysicalDeviceProperties2(h, &props);
    if (!(subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) || !(subgroup.supportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT))
        return out;
    const bool can_ask_32 = size_control && control.subgroupSizeControl &&
                            (sizes.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                            sizes.minSubgroupSize <= 32 && sizes.maxSubgroupSize >= 32;
    if (khr && coop_khr.cooperativeMatrix && (subgroup.subgroupSize == 32 || can_ask_32) && khr_shape(a, h))
        return {true, true, can_ask_32};
    if (nv && coop_nv.cooperativeMatrix && subgroup.subgroupSize == 32 && nv_shape(a, h)) return {true, false, false};
    return out;
}

std::string mib(uint64_t bytes) { return std::to_string((bytes + (1 << 19)) >> 20) + " MiB"; }

}  // namespace

bool khr_float16_sums(const PhysicalDevice& d) {
    return d.matrix_khr && khr_shape(api(), d.handle, VK_COMPONENT_TYPE_FLOAT16_KHR);
}

std::string matrix_extension_from_env(const char* value) {
    const std::string s = value ? value : "";
    require(s.empty() || s == "khr" || s == "nv" || s == "off", ErrorKind::InvalidArgument,
            "KILN_VULKAN_MATRIX=" + s + ": expected khr, nv or off");
    return s;
}

std::vector<PhysicalDevice> physical_devices(std::string* why) {
    std::string reasons;
    auto note = [&](const std::string& r) { reasons += (reasons.empty() ? "" : "; ") + r; };
    std::vector<PhysicalDevice> out;
    try {
        const Api& a = api();
        uint32_t n = 0;
        check(a.vkEnumeratePhysicalDevices(a.instance, &n, nullptr), "vkEnumeratePhysicalDevices");
        std::vector<VkPhysicalDevice> handles(n);
        check(a.vkEnumeratePhysicalDevices(a.instance, &n, handles.data()), "vkEnumeratePhysicalDevices");
        if (n == 0) note("the Vulkan loader found no device (no driver installed?)");
        for (VkPhysicalDevice h : handles) {
            PhysicalDevice d;
            d.handle = h;
            a.vkGetPhysicalDeviceProperties(h, &d.properties);
            const std::string name = d.properties.deviceName;
            if (d.properties.apiVersion < VK_API_VERSION_1_2) {
                note(name + ": Vulkan 1.2 needed, the driver offers " +
                     std::to_string(VK_API_VERSION_MAJOR(d.properties.apiVersion)) + "." +
                     std::to_string(VK_API_VERSION_MINOR(d.properties.apiVersion)));
                continue;
            }
            VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
            VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
            f11.pNext = &f12;
            VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
            features.pNext = &f11;
            a.vkGetPhysicalDeviceFeatures2(h, &features);
            if (!f12.bufferDeviceAddress) {
                note(name + ": no bufferDeviceAddress");
                continue;
            }
            d.fp16_storage = f11.storageBuffer16BitAccess;
            uint32_t families = 0;
            a.vkGetPhysicalDeviceQueueFamilyProperties(h, &families, nullptr);
            std::vector<VkQueueFamilyProperties> fam(families);
            a.vkGetPhysicalDeviceQueueFamilyProperties(h, &families, fam.data());
            bool found = false;
            for (uint32_t i = 0; i < families && !found; ++i)
                if (fam[i].queueFlags & VK_QUEUE_COMPUTE_BIT) d.queue_family = i, found = true;
            if (!found) {
                note(name + ": no compute queue");
                continue;
            }
            d.memory_budget = has_extension(a, h, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
            const char* stats = std::getenv("KILN_VULKAN_STATS");
            d.statistics = stats && *stats == '1' && a.vkGetPipelineExecutableStatisticsKHR &&
                           has_extension(a, h, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
            {
                VkPhysicalDeviceMaintenance4Properties m4{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_PROPERTIES};
                VkPhysicalDeviceMaintenance3Properties m3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
                if (has_extension(a, h, "VK_KHR_maintenance4")) m3.pNext = &m4;
                VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
                props.pNext = &m3;
                a.vkGetPhysicalDeviceProperties2(h, &props);
                d.max_allocation = m3.maxMemoryAllocationSize;
                if (m4.maxBufferSize > 0 && (d.max_allocation == 0 || m4.maxBufferSize < d.max_allocation))
                    d.max_allocation = m4.maxBufferSize;
            }
            d.cooperative_matrix_khr = has_extension(a, h, "VK_KHR_cooperative_matrix");
            d.cooperative_matrix = d.cooperative_matrix_khr || has_extension(a, h, "VK_NV_cooperative_matrix");
            const MatrixUnits units = matrix_units(a, h, d.fp16_storage);
            d.matrix_products = units.products;
            d.matrix_khr = units.khr;
            d.matrix_subgroup_32 = units.subgroup_32;
            d.matrix_off = units.off;
            VkPhysicalDeviceMemoryProperties mem;
            a.vkGetPhysicalDeviceMemoryProperties(h, &mem);
            for (uint32_t i = 0; i < mem.memoryHeapCount; ++i)
                if ((mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) && mem.memoryHeaps[i].size > d.heap_bytes) {
                    d.heap_bytes = mem.memoryHeaps[i].size;
                    d.device_local_heap = i;
                }
            out.push_back(d);
        }
    } catch (const std::exception& e) {
        note(e.what());
    }
    std::stable_sort(out.begin(), out.end(), [](const PhysicalDevice& x, const PhysicalDevice& y) {
        return type_rank(x.properties.deviceType) < type_rank(y.properties.deviceType);
    });
    if (why) *why = reasons;
    return out;
}

DeviceMemoryInfo heap_memory(const PhysicalDevice& d, int64_t held_bytes) {
    DeviceMemoryInfo m;
    m.total = static_cast<int64_t>(d.heap_bytes);
    m.free = std::max<int64_t>(0, m.total - held_bytes);
    if (d.memory_budget) {
        VkPhysicalDeviceMemoryBudgetPropertiesEXT budget{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
        VkPhysicalDeviceMemoryProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2};
        props.pNext = &budget;
        api().vkGetPhysicalDeviceMemoryProperties2(d.handle, &props);
        const uint64_t b = budget.heapBudget[d.device_local_heap], u = budget.heapUsage[d.device_local_heap];
        if (b > 0) m.free = static_cast<int64_t>(b > u ? b - u : 0);
    }
    return m;
}

DeviceDescription describe(const PhysicalDevice& d, int index, int64_t held_bytes) {
    DeviceDescription out;
    out.device = {DeviceKind::Vulkan, index};
    out.name = d.properties.deviceName;
    const uint32_t v = d.properties.apiVersion;
    out.detail = std::string(type_name(d.properties.deviceType)) + ", Vulkan " + std::to_string(VK_API_VERSION_MAJOR(v)) +
                 "." + std::to_string(VK_API_VERSION_MINOR(v)) + "." + std::to_string(VK_API_VERSION_PATCH(v)) +
                 (d.fp16_storage ? ", fp16 and fp32" : ", fp32 only (no 16-bit storage)") +
                 (d.matrix_products ? (d.matrix_khr ? ", fp16 products on matrix units (VK_KHR_cooperative_matrix)"
                                                    : ", fp16 products on matrix units (VK_NV_cooperative_matrix)")
                  : d.cooperative_matrix && d.matrix_off ? ", matrix units left unused (KILN_VULKAN_MATRIX=off)"
                  : d.cooperative_matrix && !embedded_kernel("matmul_coopk_f16") && d.cooperative_matrix_khr
                      ? ", matrix units this build has no shaders for (VK_KHR_cooperative_matrix needs glslang 13: docs/VULKAN.md)"
                  : d.cooperative_matrix ? ", cooperative matrices (not of a kind kiln uses)"
                                         : "") + ", heap " + mib(d.heap_bytes) +
                 (d.max_allocation ? ", at most " + mib(d.max_allocation) + " an allocation" : "");
    out.memory = heap_memory(d, held_bytes);
    out.emulated = d.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    return out;
}

}  // namespace kiln::vulkan
