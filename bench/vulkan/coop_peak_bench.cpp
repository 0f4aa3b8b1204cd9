// How fast the Vulkan driver runs VK_KHR_cooperative_matrix multiply-adds by themselves (coop_peak.comp), beside
// the product kernels' rate, to tell what the matrix units give through the extension from what kiln's kernel
// around them costs (docs/VULKAN.md, issue 23). Prints TFLOP/s per accumulator type and mode:
//   kiln_vulkan_coop_peak_bench [device index] [runs]
// mode 0: multiply-adds on registers only; 1: A and B reloaded from shared memory every round (gemm_coop.glsl's
// inner loop without its barriers); 2: as 1, subgroups on rows 32 apart; 3: as 1, B row-major; 4: A alone
// reloaded; 5: as 1 with gemm_coop.glsl's two barriers a k step of 32; 6: and its stash into shared memory; 7: and
// its fetch of the next step from device memory; 8: and its epilogue every 40 rounds (tiles of k = 640); 9: as 7
// with the fetch addressed as the kernel's (rows of A and B); 10: and the kernel's scalar fallback beside it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backends/vulkan/vulkan_backend.h"
#include "core/backend.h"
#include "kiln/error.h"
#include "ops/device_op_checks.h"

using namespace kiln;

namespace {

struct PeakParams {
    uint64_t out;
    uint32_t iters, mode;
    uint64_t src;
    uint32_t src_n, out_n;
};

}  // namespace

int main(int argc, char** argv) {
    try {
        register_backend_factory(DeviceKind::Vulkan, vulkan::vulkan_backend_factory());
        const int index = argc > 1 ? std::atoi(argv[1]) : 0;
        const int runs = argc > 2 ? std::atoi(argv[2]) : 7;
        auto& vk = static_cast<vulkan::VulkanBackend&>(backend_for(Device{DeviceKind::Vulkan, index}));
        std::printf("%s\n", vk.describe().name.c_str());
        require(vk.physical().matrix_khr, ErrorKind::Unsupported,
                "this device runs no VK_KHR_cooperative_matrix kernels (or this build has none)");
        const uint32_t groups = 132 * 8, iters = 2048;
        Tensor out = Tensor::filled({int64_t(groups) * 16384}, 0.0f).to_device(vk, DType::F32);  // mode 8's tiles
        const auto address = reinterpret_cast<uint64_t>(ops::device_at(out, 0));
        // What mode 7 reads: 64 MiB of float16 zeros (beyond the L2 cache), 16 bytes at a time.
        Tensor src = Tensor::filled({int64_t(32) << 20}, 0.0f).to_device(vk, DType::F16);
        const auto src_address = reinterpret_cast<uint64_t>(ops::device_at(src, 0));
        // Per round each of the 8 subgroups makes 8 products of 16x16x16: 2 * 16^3 FLOP each.
        const double flops = double(groups) * 8 * 8 * 2.0 * 16 * 16 * 16 * iters;
        for (const char* kernel : {"peak_coopk_f32acc", "peak_coopk_f16acc", "peak_coopk_f32glob"})
            for (uint32_t mode : {0u, 1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u, 9u, 10u}) {
                const PeakParams params{address, iters, mode, src_address, uint32_t(src.numel() / 8), uint32_t(out.numel())};
                vk.dispatch(kernel, params, groups);  // pipeline made, clocks up
                vk.finish();
                std::vector<double> ms;
                for (int r = 0; r < runs; ++r) {
                    const auto start = std::chrono::steady_clock::now();
                    for (int j = 0; j < 5; ++j) vk.dispatch(kernel, params, groups);
                    vk.finish();
                    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / 5);
                }
                std::sort(ms.begin(), ms.end());
                const double med = ms[ms.size() / 2];
                std::printf("%-18s mode %u: %8.3f ms  %6.1f TFLOP/s\n", kernel, mode, med, flops / med * 1e-9);
                std::fflush(stdout);
            }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "kiln_vulkan_coop_peak_bench: %s\n", e.what());
        return 1;
    }
}
