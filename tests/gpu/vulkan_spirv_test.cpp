// Every kernel the Vulkan backend embeds is valid SPIR-V for the Vulkan version it is compiled for, as SPIRV-Tools'
// spirv-val judges it. A driver need not report invalid SPIR-V: it may crash at pipeline creation. Session 22 met
// one: two cooperative matrices declared in one statement (`MatB kt, vt;`) gave the second no matrix use under
// glslang 13.1, and NVIDIA's driver took the process down with a segmentation fault on its first attention call.
// Needs no device. Runs where spirv-val is on PATH (CI installs SPIRV-Tools beside glslang) and skips elsewhere,
// unless KILN_EXPECT_SPIRV_VAL=1 (set by .ci/run) makes its absence a failure.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#if KILN_HAS_VULKAN
#include <unistd.h>

#include "backends/vulkan/spirv_table.h"

namespace {

// The command's exit status and what it printed (stdout and stderr together).
int run(const std::string& command, std::string& output) {
    output.clear();
    FILE* pipe = popen((command + " 2>&1").c_str(), "r");
    if (!pipe) return -1;
    char buffer[512];
    while (std::fgets(buffer, sizeof buffer, pipe)) output += buffer;
    const int status = pclose(pipe);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(VulkanSpirv, EveryEmbeddedKernelIsValid) {
    std::string output;
    if (run("spirv-val --version", output) != 0) {
        const char* expect = std::getenv("KILN_EXPECT_SPIRV_VAL");
        if (expect && std::string(expect) == "1") FAIL() << "KILN_EXPECT_SPIRV_VAL=1 but spirv-val is not on PATH";
        GTEST_SKIP() << "spirv-val (SPIRV-Tools) is not on PATH";
    }
    const auto dir = std::filesystem::temp_directory_path() / ("kiln-spirv-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    const auto& kernels = kiln::vulkan::spirv_kernels();
    ASSERT_FALSE(kernels.empty());
    for (const kiln::vulkan::SpirvKernel& k : kernels) {
        const auto file = dir / (std::string(k.name) + ".spv");
        std::ofstream(file, std::ios::binary).write(reinterpret_cast<const char*>(k.words), std::streamsize(k.count) * 4);
        // vulkan1.2: the environment CMakeLists.txt compiles every kernel for (glslc's and glslangValidator's --target-env).
        EXPECT_EQ(run("spirv-val --target-env vulkan1.2 '" + file.string() + "'", output), 0) << k.name << ":\n" << output;
    }
    std::filesystem::remove_all(dir);
    std::printf("[ spirv ] %zu kernels validated\n", kernels.size());
}

}  // namespace
#endif
