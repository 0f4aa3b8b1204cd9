#include "backends/vulkan/vulkan_kernels.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "backends/vulkan/spirv_table.h"
#include "kiln/error.h"

namespace kiln::vulkan {

namespace {

std::string hex(uint32_t v) {
    char b[16];
    std::snprintf(b, sizeof b, "%x", v);
    return b;
}

}  // namespace

std::string VulkanKernels::cache_directory() {
    if (const char* d = std::getenv("KILN_VULKAN_CACHE_DIR"); d && *d) return d;
    if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/kiln";
    if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/kiln";
    return "";
}

VulkanKernels::VulkanKernels(VkDevice device, const PhysicalDevice& physical)
    : device_(device), matrix_subgroup_32_(physical.matrix_subgroup_32), statistics_(physical.statistics) {
    const Api& a = api();
    VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushConstantBytes};
    VkPipelineLayoutCreateInfo layout{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    layout.pushConstantRangeCount = 1;
    layout.pPushConstantRanges = &range;
    check(a.vkCreatePipelineLayout(device_, &layout, nullptr, &layout_), "vkCreatePipelineLayout");

    // One file per device model and driver version; the driver also checks the data's own header and
    // ignores a cache that is not its own, so a stale or damaged file costs a recompile, never a failure.
    const std::string dir = cache_directory();
    std::vector<char> data;
    if (!dir.empty()) {
        const VkPhysicalDeviceProperties& p = physical.properties;
        const std::string device = hex(p.vendorID) + "-" + hex(p.deviceID) + "-" + hex(p.driverVersion);
        cache_file_ = dir + "/vulkan-pipelines-" + device + ".bin";
        choices_ = ProductChoices(dir + "/vulkan-choices-" + device + ".txt");
        std::ifstream in(cache_file_, std::ios::binary);
        if (in) data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    VkPipelineCacheCreateInfo info{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    info.initialDataSize = data.size();
    info.pInitialData = data.empty() ? nullptr : data.data();
    if (a.vkCreatePipelineCache(device_, &info, nullptr, &cache_) != VK_SUCCESS) {
        info.initialDataSize = 0;  // a cache the driver rejects: start empty
        info.pInitialData = nullptr;
        check(a.vkCreatePipelineCache(device_, &info, nullptr, &cache_), "vkCreatePipelineCache");
    }
}

VulkanKernels::~VulkanKernels() {
    save_cache();
    const Api& a = api();
    for (auto& [name, p] : pipelines_) a.vkDestroyPipeline(device_, p, nullptr);
    a.vkDestroyPipelineCache(device_, cache_, nullptr);
    a.vkDestroyPipelineLayout(device_, layout_, nullptr);
}

VkPipeline VulkanKernels::pipeline(const std::string& kernel) {
    if (auto it = pipelines_.find(kernel); it != pipelines_.end()) return it->second;
    const SpirvKernel* spirv = nullptr;
    for (const SpirvKernel& k : spirv_kernels())
        if (kernel == k.name) spirv = &k;
    require(spirv != nullptr, ErrorKind::Unsupported, "vulkan: no kernel named " + kernel + " in this build");
    const auto start = std::chrono::steady_clock::now();
    const Api& a = api();
    VkShaderModuleCreateInfo module_info{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    module_info.codeSize = size_t(spirv->count) * 4;
    module_info.pCode = spirv->words;
    VkShaderModule module = VK_NULL_HANDLE;
    check(a.vkCreateShaderModule(device_, &module_info, nullptr, &module), "vkCreateShaderModule " + kernel);
    VkComputePipelineCreateInfo info{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    info.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
    info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    info.stage.module = module;
    info.stage.pName = "main";
    // gemm_coop.glsl splits its 256 threads into 8 subgroups of 32 (its variants, 128 or 256 into 4 or 8).
    VkPipelineShaderStageRequiredSubgroupSizeCreateInfoEXT subgroup_32{
        VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO_EXT};
    subgroup_32.requiredSubgroupSize = 32;
    if (matrix_subgroup_32_ && kernel.find("_coop") != std::string::npos) info.stage.pNext = &subgroup_32;
    info.layout = layout_;
    if (statistics_) info.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
    VkPipeline p = VK_NULL_HANDLE;
    const VkResult r = a.vkCreateComputePipelines(device_, cache_, 1, &info, nullptr, &p);
    a.vkDestroyShaderModule(device_, module, nullptr);
    check(r, "vkCreateComputePipelines " + kernel);
    if (statistics_) print_statistics(kernel, p);
    pipelines_[kernel] = p;
    dirty_ = true;
    ++made_;
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return p;
}

// "vulkan stats KERNEL: NAME=VALUE ...", one line per executable, in the driver's words (registers and the like).
void VulkanKernels::print_statistics(const std::string& kernel, VkPipeline p) const {
    const Api& a = api();
    VkPipelineInfoKHR pipeline{VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR};
    pipeline.pipeline = p;
    uint32_t n = 0;
    if (a.vkGetPipelineExecutablePropertiesKHR(device_, &pipeline, &n, nullptr) != VK_SUCCESS) return;
    for (uint32_t e = 0; e < n; ++e) {
        VkPipelineExecutableInfoKHR exe{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR, nullptr, p, e};
        uint32_t m = 0;
        if (a.vkGetPipelineExecutableStatisticsKHR(device_, &exe, &m, nullptr) != VK_SUCCESS) continue;
        std::vector<VkPipelineExecutableStatisticKHR> stats(m, {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR});
        if (a.vkGetPipelineExecutableStatisticsKHR(device_, &exe, &m, stats.data()) != VK_SUCCESS) continue;
        std::string line = "vulkan stats " + kernel + ":";
        for (const VkPipelineExecutableStatisticKHR& s : stats)
            line += std::string(" ") + s.name + "=" +
                    (s.format == VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR ? std::to_string(s.value.f64)
                     : s.format == VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR ? std::to_string(s.value.i64)
                                                                                      : std::to_string(s.value.u64));
        std::fprintf(stderr, "%s\n", line.c_str());
    }
}

void VulkanKernels::save_cache() noexcept {
    choices_.save();
    if (!dirty_ || cache_file_.empty()) return;
    dirty_ = false;
    try {
        const Api& a = api();
        size_t size = 0;
        if (a.vkGetPipelineCacheData(device_, cache_, &size, nullptr) != VK_SUCCESS || size == 0) return;
        std::vector<char> data(size);
        if (a.vkGetPipelineCacheData(device_, cache_, &size, data.data()) != VK_SUCCESS) return;
        std::error_code ec;
        std::filesystem::create_directories(std::filesystem::path(cache_file_).parent_path(), ec);
        // Written beside and renamed over: two kiln processes never see half a file.
        const std::string tmp = cache_file_ + ".tmp" + std::to_string(reinterpret_cast<uintptr_t>(this));
        {
            std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
            if (!out) return;
            out.write(data.data(), static_cast<std::streamsize>(size));
            if (!out) return;
        }
        std::filesystem::rename(tmp, cache_file_, ec);
        if (ec) std::filesystem::remove(tmp, ec);
        if (const char* v = std::getenv("KILN_VULKAN_VERBOSE"); v && *v == '1')
            std::fprintf(stderr, "vulkan: %d pipelines made in %.0f ms so far; cache of %zu bytes saved to %s\n", made_,
                         seconds_ * 1e3, size, cache_file_.c_str());
    } catch (...) {
        // An unwritable cache only costs the next run its compile time.
    }
}

}  // namespace kiln::vulkan
