// Times the Vulkan backend's product kernels (linear and conv2d) on SD-sized shapes, once per build
// (128x128 tiles, 64x64 tiles, matrix units where the device has them), in float16 and float32: median of
// the runs after a warm-up, with the TFLOP/s it reaches. The products are where a UNet's time goes, and this
// isolates them from the rest of a step; `kiln bench` gives the whole-model figures.
//   kiln_vulkan_products_bench [device index] [runs] [f16|matrix|attention]
// f16: float16 products only; matrix: only their matrix-unit build (KILN_VULKAN_COOP picks its variant);
// attention: SD 1.5's attention shapes instead, on the FMA flash kernel (64 and 128 queries a workgroup) and on
// the matrix one, in float16 and float32.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "backends/vulkan/vulkan_backend.h"
#include "core/backend.h"
#include "kiln/error.h"
#include "ops/ops.h"

using namespace kiln;
using Products = vulkan::VulkanBackend::Products;

namespace {

struct Case {
    std::string name;
    double flops;
    std::function<Tensor()> run;
};

// Each sample is 20 products submitted together and waited for once, so that the GPU stays busy and a
// submit's latency (tens of microseconds) is spread over them: the figure is the kernel's own time.
double median_ms(vulkan::VulkanBackend& vk, const std::function<Tensor()>& run, int runs) {
    constexpr int kPerSubmit = 20;
    for (int i = 0; i < 2; ++i) run();  // pipelines made, the measured choice (if any) settled
    vk.finish();
    std::vector<double> ms;
    for (int i = 0; i < runs; ++i) {
        const auto start = std::chrono::steady_clock::now();
        for (int j = 0; j < kPerSubmit; ++j) run();
        vk.finish();
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
                     kPerSubmit);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

// SD 1.5's attentions in a UNet call at 64x64 latents with guidance (batch 2, 8 heads): self-attention at each
// level (4096 tokens of 40 dimensions a head, 1024 of 80, 256 and 64 of 160) and cross-attention to 77 tokens.
int attention_bench(vulkan::VulkanBackend& vk, int runs) {
    using A = vulkan::VulkanBackend::Attention;
    std::printf("\n%-30s %5s %14s %14s %14s\n", "attention (b2, 8 heads)", "dtype", "FMA 64 rows", "FMA 128 rows",
                "matrix units");
    for (DType t : {DType::F16, DType::F32}) {
        if (!vk.supports(t)) continue;
        for (auto [lq, lk, d] : {std::array<int64_t, 3>{4096, 4096, 40}, {1024, 1024, 80}, {256, 256, 160},
                                 {64, 64, 160}, {4096, 77, 40}, {1024, 77, 80}, {256, 77, 160}}) {
            const int64_t c = 8 * d;
            Tensor q = Tensor::filled({2, lq, c}, 0.25f).to_device(vk, t);
            Tensor kv = Tensor::filled({2, lk, c}, 0.125f).to_device(vk, t);
            const double flops = 4.0 * 2 * double(lq) * double(lk) * double(c);
            std::printf("%-30s %5s", ("q " + std::to_string(lq) + " k " + std::to_string(lk) + " d " + std::to_string(d)).c_str(),
                        dtype_name(t));
            for (int column = 0; column < 3; ++column) {
                const bool matrix = column == 2;
                if (matrix && (t != DType::F16 || !vk.physical().matrix_products)) {
                    std::printf(" %14s", "-");
                    continue;
                }
                vk.set_attention(matrix ? A::Matrix : A::Flash);
                vk.set_flash_queries(column == 0 ? 64 : column == 1 ? 128 : 0);
                const double ms = median_ms(vk, [&] { return ops::attention(q, kv, kv, 8); }, runs);
                std::printf(" %6.3f ms %4.1fT", ms, flops / ms * 1e-9);
            }
            std::printf("\n");
            std::fflush(stdout);
        }
    }
    vk.set_flash_queries(0);
    std::printf("\n(median of %d samples of 20 calls each, after 2; T = TFLOP/s, a multiply-add counting 2; the FMA "
                "kernel takes 128 rows only for heads of up to 64 dimensions)\n", runs);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        // Linked statically (it reaches inside the backend), so registered directly rather than as a plugin.
        register_backend_factory(DeviceKind::Vulkan, vulkan::vulkan_backend_factory());
        const int index = argc > 1 ? std::atoi(argv[1]) : 0;
        const int runs = argc > 2 ? std::atoi(argv[2]) : 20;
        const std::string only = argc > 3 ? argv[3] : "";
        require(only.empty() || only == "f16" || only == "matrix" || only == "attention", ErrorKind::InvalidArgument,
                "the third argument is f16, matrix or attention, not " + only);
        auto& vk = static_cast<vulkan::VulkanBackend&>(backend_for(Device{DeviceKind::Vulkan, index}));
        std::printf("%s\n", vk.describe().name.c_str());
        if (only == "attention") return attention_bench(vk, runs);
        for (DType t : {DType::F16, DType::F32}) {
            if (!vk.supports(t) || (!only.empty() && t != DType::F16)) continue;
            auto dev = [&](Shape s) { return Tensor::filled(std::move(s), 0.25f).to_device(vk, t); };
            std::vector<Case> cases;
            // SD 1.5's UNet at 64x64 latents with guidance (batch 2): attention projections, GEGLU in and out.
            for (auto [m, k, n] : {std::array<int64_t, 3>{8192, 320, 320}, {8192, 320, 2560}, {8192, 1280, 320},
                                  {2048, 640, 5120}, {154, 768, 320},
                                  // k from one step of 32 to 512 steps: what a tile costs besides its k steps
                                  // (prologue, epilogue) against what each step costs
                                  {2048, 32, 2048}, {2048, 256, 2048}, {2048, 2048, 2048}, {2048, 16384, 2048}}) {
                Tensor x = dev({1, m, k}), w = dev({n, k});
                cases.push_back({"linear " + std::to_string(m) + "x" + std::to_string(k) + " -> " + std::to_string(n),
                                 2.0 * m * n * k, [=] { return ops::linear(x, w, nullptr); }});
            }
            // UNet 3x3 convolutions per level, then the VAE decoder's at 64, 256 and 512 pixels.
            for (auto [b, c, hw, co] : {std::array<int64_t, 4>{2, 320, 64, 320}, {2, 640, 32, 640}, {2, 1280, 16, 1280},
                                       {1, 512, 64, 512}, {1, 256, 256, 256}, {1, 128, 512, 128}}) {
                Tensor x = dev({b, c, hw, hw}), w = dev({co, c, 3, 3});
                cases.push_back({"conv3x3 " + std::to_string(b) + "x" + std::to_string(c) + "x" + std::to_string(hw) +
                                     "^2 -> " + std::to_string(co),
                                 2.0 * b * co * hw * hw * c * 9, [=] { return ops::conv2d(x, w, nullptr, 1, 1); }});
            }
            std::printf("\n%-34s %5s %14s %14s %14s %14s %14s\n", "product", "dtype", "128x128 tiles", "64x64 tiles",
                        "64x128 tiles", "128x64 tiles", "matrix units");
            for (const Case& c : cases) {
                std::printf("%-34s %5s", c.name.c_str(), dtype_name(t));
                for (Products p : {Products::Large, Products::Small, Products::Rows64, Products::Cols64, Products::Matrix}) {
                    if ((p == Products::Matrix && (t != DType::F16 || !vk.physical().matrix_products)) ||
                        (only == "matrix" && p != Products::Matrix)) {
                        std::printf(" %14s", "-");
                        continue;
                    }
                    vk.set_products(p);
                    const double ms = median_ms(vk, c.run, runs);
                    std::printf(" %6.3f ms %4.0fT", ms, c.flops / ms * 1e-9);
                }
                std::printf("\n");
                std::fflush(stdout);
            }
        }
        std::printf("\n(median of %d samples of 20 products each, after 2; T = TFLOP/s, a multiply-add counting 2)\n", runs);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "kiln_vulkan_products_bench: %s\n", e.what());
        return 1;
    }
}
