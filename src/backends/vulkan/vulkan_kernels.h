// The compute pipelines of one device, made on first use from the embedded SPIR-V (spirv_table.h). All share
// one layout: no descriptor sets, 128 bytes of push constants (the minimum every driver offers) that carry
// the tensors' device addresses and the sizes. Pipelines go through a VkPipelineCache that is kept on disk
// (docs/VULKAN.md), so the driver compiles each shader once per machine, not once per run: first-run shader
// compiles are what AMD users complain about most.
#pragma once
#include <map>
#include <string>

#include "backends/vulkan/physical_devices.h"
#include "backends/vulkan/product_choices.h"

namespace kiln::vulkan {

constexpr uint32_t kPushConstantBytes = 128;

class VulkanKernels {
public:
    VulkanKernels(VkDevice device, const PhysicalDevice& physical);
    ~VulkanKernels();
    VulkanKernels(const VulkanKernels&) = delete;
    VulkanKernels& operator=(const VulkanKernels&) = delete;

    VkPipeline pipeline(const std::string& kernel);  // Unsupported for a name kiln does not embed
    VkPipelineLayout layout() const { return layout_; }
    // Writes the pipeline cache to disk if pipelines were made since the last save, and the products' choices if
    // some were made; never throws.
    // KILN_VULKAN_VERBOSE=1 prints a line each time (pipelines made, time spent making them).
    void save_cache() noexcept;
    // Where the cache lives: $KILN_VULKAN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln; empty
    // when none of them is set.
    static std::string cache_directory();
    const std::string& cache_file() const { return cache_file_; }
    // The products' measured choices, kept beside the pipeline cache (vulkan-choices-...txt) and saved with it.
    ProductChoices& product_choices() { return choices_; }
    int pipelines_made() const { return made_; }
    double seconds_making_pipelines() const { return seconds_; }

private:
    VkDevice device_;
    bool matrix_subgroup_32_;  // PhysicalDevice::matrix_subgroup_32: the matrix kernels ask for 32-wide subgroups
    bool statistics_;          // PhysicalDevice::statistics: print each pipeline's compiler statistics
    void print_statistics(const std::string& kernel, VkPipeline p) const;
    VkPipelineLayout layout_ = VK_NULL_HANDLE;
    VkPipelineCache cache_ = VK_NULL_HANDLE;
    std::string cache_file_;
    ProductChoices choices_{""};
    std::map<std::string, VkPipeline> pipelines_;
    bool dirty_ = false;
    int made_ = 0;
    double seconds_ = 0;
};

}  // namespace kiln::vulkan
