// The SPIR-V of every kernel in kernels.cmake, compiled by glslc at build time and embedded
// (the build generates spirv_table.cpp).
#pragma once
#include <cstdint>
#include <vector>

namespace kiln::vulkan {

struct SpirvKernel {
    const char* name;  // "matmul_f16"
    const uint32_t* words;
    uint32_t count;
};

const std::vector<SpirvKernel>& spirv_kernels();

}  // namespace kiln::vulkan
