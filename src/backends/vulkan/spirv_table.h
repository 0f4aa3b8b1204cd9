// The SPIR-V of every kernel in kernels.cmake, compiled at build time (glslc; glslang for the
// VK_KHR_cooperative_matrix kernels) and embedded
// (the build generates spirv_table.cpp).
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace kiln::vulkan {

struct SpirvKernel {
    const char* name;  // "matmul_f16"
    const uint32_t* words;
    uint32_t count;
};

const std::vector<SpirvKernel>& spirv_kernels();

// Whether this build embeds the kernel (the VK_KHR_cooperative_matrix ones need glslang 13 at build time).
inline bool embedded_kernel(const char* name) {
    for (const SpirvKernel& k : spirv_kernels())
        if (std::string_view(k.name) == name) return true;
    return false;
}

}  // namespace kiln::vulkan
