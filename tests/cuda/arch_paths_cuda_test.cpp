// Each architecture's paths (arch_paths.h), as NVIDIA documents them (PTX ISA target notes, cuDNN's SDPA support
// matrix, the Programming Guide's per-capability shared memory), and KILN_CUDA_ARCH; on a GPU, the backend's.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "backends/cuda/arch_paths.h"
#include "backends/cuda/attention.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/dependent_launch.h"
#include "backends/cuda/device_info.h"
#include "core/tensor.h"
#include "kiln/error.h"

namespace kiln::cuda {
namespace {

TEST(ArchPaths, EachArchitectureGetsWhatItsHardwareHas) {
    struct {
        int cc;
        bool ampere, fp8, hopper;  // 8.0's features, 8.9's fp8, 9.0's
        int shared_kib;
    } const table[] = {{75, false, false, false, 64}, {80, true, false, false, 163}, {86, true, false, false, 99},
                       {89, true, true, false, 99},   {90, true, true, true, 227}};
    for (const auto& e : table) {
        const ArchPaths p = arch_paths(e.cc);
        SCOPED_TRACE(capability_name(e.cc));
        EXPECT_EQ(p.capability, e.cc);
        for (bool f : {p.flash_attention, p.cudnn_attention, p.bf16, p.tf32, p.int8_mma}) EXPECT_EQ(f, e.ampere);
        EXPECT_EQ(p.fp8_mma, e.fp8);
        EXPECT_EQ(p.dependent_launch, e.hopper);
        EXPECT_EQ(p.tma, e.hopper);
        EXPECT_EQ(p.max_shared_per_block, e.shared_kib * 1024);
    }
}

// The flash kernel from 8.0 where a configuration fits the shared memory (SD's D = 160 not on 8.6 / 8.9).
TEST(ArchPaths, TheFlashKernelRunsWhereItsSharedMemoryFits) {
    for (int cc : {75, 80, 86, 89, 90})
        for (int d : {40, 64, 80, 96, 128, 160, 256}) {
            const ArchPaths p = arch_paths(cc);
            const auto configs = detail::attention_configs(d);
            bool fits = false;
            for (const detail::AttentionConfig& c : configs) fits = fits || c.smem_bytes <= size_t(p.max_shared_per_block);
            SCOPED_TRACE(capability_name(cc) + " D = " + std::to_string(d));
            EXPECT_EQ(flash_attention_runs(d, p), cc >= 80 && fits);
            const int chosen = detail::choose_attention_config(d, 2, 4096, 8, 82, p.max_shared_per_block);
            EXPECT_EQ(chosen >= 0, fits);
            if (chosen >= 0) {
                EXPECT_LE(configs[chosen].smem_bytes, size_t(p.max_shared_per_block));
            }
        }
    for (int d : {40, 64, 80}) EXPECT_TRUE(flash_attention_runs(d, arch_paths(86))) << d;
    EXPECT_FALSE(flash_attention_runs(160, arch_paths(89)));
    EXPECT_TRUE(flash_attention_runs(160, arch_paths(80)));
    EXPECT_FALSE(flash_attention_runs(40, arch_paths(75)));
}

TEST(ArchPaths, KilnCudaArchLowersTheCapabilityOnly) {
    EXPECT_EQ(chosen_capability(90, nullptr), 90);
    EXPECT_EQ(chosen_capability(86, ""), 86);
    EXPECT_EQ(chosen_capability(90, "75"), 75);
    EXPECT_EQ(chosen_capability(90, "8.6"), 86);
    EXPECT_EQ(chosen_capability(90, "sm_89"), 89);
    EXPECT_EQ(chosen_capability(90, "90"), 90);
    EXPECT_EQ(chosen_capability(120, "10.0"), 100);
    for (const char* bad : {"95", "100", "70", "8", "sm_8x", "8.6.1", " 80", "eighty"}) {
        try {
            chosen_capability(86, bad);
            ADD_FAILURE() << bad << " accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << bad;
            EXPECT_NE(std::string(e.what()).find(std::string("KILN_CUDA_ARCH=") + bad), std::string::npos) << e.what();
        }
    }
}

// On a GPU (run it under each KILN_CUDA_ARCH too): the backend takes exactly the paths arch_paths gives it.
TEST(ArchPaths, TheBackendFollowsItsDevicesPaths) {
    std::string why;
    if (cuda_devices(&why).empty()) GTEST_SKIP() << "no CUDA GPU on this machine: " << why;
    CudaBackend gpu(0);
    const ArchPaths& arch = device_arch_paths(0);
    std::printf("[ figures  ] cuda:0: %s\n", gpu.describe().detail.c_str());
    EXPECT_EQ(gpu.arch().capability, arch.capability);
    EXPECT_EQ(gpu.supports(DType::BF16), arch.bf16);
    if (!arch.bf16) {
        try {
            Tensor::empty_on(gpu, {4}, DType::BF16);
            ADD_FAILURE() << "a bf16 tensor below 8.0";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
            EXPECT_NE(std::string(e.what()).find("fp16"), std::string::npos) << e.what();  // what to use instead
        }
    }
    if (!arch.cudnn_attention) {
        EXPECT_EQ(gpu.cudnn_attention(), nullptr);
    }
    gpu.set_fast_float32(true);
    EXPECT_EQ(gpu.fast_float32(), arch.tf32);
    gpu.set_fast_float32(false);
    const char* pdl = std::getenv("KILN_CUDA_PDL");
    if (!pdl || std::string(pdl) != "0") {
        EXPECT_EQ(detail::dependent_launch_supported(), arch.dependent_launch);
    }
}

}  // namespace
}  // namespace kiln::cuda
