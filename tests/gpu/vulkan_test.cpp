// What only the Vulkan backend has: its device list and order, the pipeline cache it keeps on disk, and the
// errors a user meets (no such device, bfloat16, a tensor beyond the driver's largest allocation). Runs
// where this build has Vulkan and the loader finds a device (lavapipe in CI), and skips elsewhere, unless
// KILN_EXPECT_VULKAN=1 (set by .ci/run) says a device must be there: then its absence fails.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <tuple>

#include "core/backend.h"
#include "core/tensor.h"
#include "kiln/error.h"
#include "ops/ops.h"
#include "ops/op_observer.h"
#include "gpu/linked_backends.h"
#include "common/op_bounds.h"
#include "common/fixtures.h"
#include "pipeline/generate.h"
#include "pipeline/vae_tiling.h"
#if KILN_HAS_VULKAN
#include "backends/vulkan/physical_devices.h"
#include "backends/vulkan/vulkan_backend.h"
#include "backends/vulkan/spirv_table.h"
#include "backends/vulkan/vulkan_kernels.h"
#endif

using namespace kiln;

namespace {

// CI installs lavapipe and glslc so that every Vulkan test runs; without this, a build that lost them
// would skip the tests and stay green.
bool vulkan_expected() {
    const char* v = std::getenv("KILN_EXPECT_VULKAN");
    return v && std::string(v) == "1";
}

#if KILN_HAS_VULKAN
// The first Vulkan device, or nullptr with a reason.
Backend* vulkan_or_null(std::string* why) {
    test::register_linked_backends();
    for (const DeviceDescription& d : list_devices())
        if (d.device.kind == DeviceKind::Vulkan) return &backend_for(d.device);
    vulkan::physical_devices(why);
    if (why->empty()) *why = "no Vulkan device";
    return nullptr;
}
#define KILN_VULKAN_OR_SKIP(var)                                                         \
    std::string var##_why;                                                               \
    Backend* var = vulkan_or_null(&var##_why);                                           \
    if (!var && vulkan_expected()) FAIL() << "KILN_EXPECT_VULKAN=1 but " << var##_why;   \
    if (!var) GTEST_SKIP() << var##_why
#endif

#if KILN_HAS_VULKAN
// Values in [-1, 1) from a linear congruential generator: the same inputs on every run and platform.
Tensor uniform_values(Shape shape, uint32_t seed) {
    Tensor t(std::move(shape));
    uint32_t x = seed;
    for (float& v : t.values()) v = float((x = x * 1664525u + 1013904223u) >> 8) / float(1 << 24) * 2.0f - 1.0f;
    return t;
}

Tensor abs_of(Tensor t) {
    for (float& v : t.values()) v = std::fabs(v);
    return t;
}
#endif

}  // namespace

// The per-device suites (Devices/Ops, Devices/Models) have no instance without a device, so they cannot
// skip loudly; this test is where a missing device fails when one is expected.
TEST(VulkanDevices, PresentWhereExpected) {
    if (!vulkan_expected()) GTEST_SKIP() << "KILN_EXPECT_VULKAN is not 1";
#if KILN_HAS_VULKAN
    std::string why;
    EXPECT_NE(vulkan_or_null(&why), nullptr) << "KILN_EXPECT_VULKAN=1 but " << why;
#else
    FAIL() << "KILN_EXPECT_VULKAN=1 but kiln was built without Vulkan (CMake found no libvulkan-dev or glslc)";
#endif
}

TEST(VulkanDevices, ParseAndName) {
    EXPECT_EQ(parse_device("vulkan"), (Device{DeviceKind::Vulkan, 0}));
    EXPECT_EQ(parse_device("vulkan:12"), (Device{DeviceKind::Vulkan, 12}));
    EXPECT_EQ(device_name(Device{DeviceKind::Vulkan, 3}), "vulkan:3");
    for (const char* bad : {"vulkan:", "vulkan:x", "vulkan:1234", "vulkan0", "Vulkan"})
        EXPECT_THROW(parse_device(bad), Error) << bad;
}

#if KILN_HAS_VULKAN

TEST(VulkanDevices, ListedDiscreteFirstAndNeverAutoWhenEmulated) {
    KILN_VULKAN_OR_SKIP(gpu);
    std::string why;
    const std::vector<vulkan::PhysicalDevice> devices = vulkan::physical_devices(&why);
    ASSERT_FALSE(devices.empty());
    for (size_t i = 1; i < devices.size(); ++i)  // discrete, integrated, virtual, CPU
        EXPECT_LE(devices[i - 1].properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU,
                  devices[i].properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU);
    const DeviceDescription d = gpu->describe();
    std::printf("[ vulkan ] %s: %s\n", d.name.c_str(), d.detail.c_str());
    EXPECT_GT(d.memory.total, 0);
    const Device picked = resolve_device("auto");
    if (d.emulated) EXPECT_NE(picked, gpu->device()) << "auto picked a device that runs on the CPU";
}

TEST(VulkanErrors, NamedClearly) {
    KILN_VULKAN_OR_SKIP(gpu);
    try {
        resolve_device("vulkan:99");
        ADD_FAILURE() << "vulkan:99 resolved";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
        EXPECT_NE(std::string(e.what()).find("vulkan:99"), std::string::npos) << e.what();
    }
    try {
        Tensor::empty_on(*gpu, {4}, DType::BF16);
        ADD_FAILURE() << "bf16 on Vulkan";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
        EXPECT_NE(std::string(e.what()).find("--precision fp16 or fp32"), std::string::npos) << e.what();
    }
    // Beyond the driver's largest single allocation (2 GiB on lavapipe, 2-4 GiB on AMD): recoverable, named.
    try {
        Tensor::empty_on(*gpu, {int64_t(1) << 33}, DType::F32);  // 32 GiB
        ADD_FAILURE() << "32 GiB in one allocation";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory) << e.what();
        EXPECT_NE(std::string(e.what()).find("MiB"), std::string::npos) << e.what();
    }
    Tensor x = Tensor({3}, {1.0f, 2.0f, 3.0f}).to_device(*gpu, DType::F32);  // still works
    EXPECT_EQ(x.to_host()[2], 3.0f);
}

// The pipeline cache: the first backend on a machine writes it, later processes read it back (the driver
// then skips compiling). Tested on VulkanKernels directly, in a directory of the test's own.
TEST(VulkanPipelineCache, WrittenOnceAndReadBack) {
    KILN_VULKAN_OR_SKIP(gpu);
    std::string why;
    const std::vector<vulkan::PhysicalDevice> devices = vulkan::physical_devices(&why);
    const auto dir = std::filesystem::temp_directory_path() / ("kiln-vulkan-cache-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    ::setenv("KILN_VULKAN_CACHE_DIR", dir.c_str(), 1);
    const vulkan::Api& api = vulkan::api();
    const vulkan::PhysicalDevice& pd = devices[0];
    float priority = 1;
    VkDeviceQueueCreateInfo queue{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    queue.queueFamilyIndex = pd.queue_family;
    queue.queueCount = 1;
    queue.pQueuePriorities = &priority;
    VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    f11.storageBuffer16BitAccess = pd.fp16_storage;
    VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    f12.bufferDeviceAddress = VK_TRUE;
    f11.pNext = &f12;
    VkDeviceCreateInfo info{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    info.pNext = &f11;
    info.queueCreateInfoCount = 1;
    info.pQueueCreateInfos = &queue;
    VkDevice device = VK_NULL_HANDLE;
    ASSERT_EQ(api.vkCreateDevice(pd.handle, &info, nullptr, &device), VK_SUCCESS);
    std::string file;
    {
        vulkan::VulkanKernels first(device, pd);
        file = first.cache_file();
        EXPECT_EQ(file.rfind(dir.string(), 0), 0u) << file;
        EXPECT_NE(first.pipeline("matmul_f32"), VkPipeline(VK_NULL_HANDLE));
        EXPECT_EQ(first.pipelines_made(), 1);
        EXPECT_THROW(first.pipeline("no_such_kernel"), Error);
    }  // saved on destruction
    ASSERT_TRUE(std::filesystem::exists(file));
    EXPECT_GT(std::filesystem::file_size(file), 0u);
    {
        // Damaged data is ignored by the driver (or refused, and kiln starts empty): never an error.
        vulkan::VulkanKernels second(device, pd);
        EXPECT_NE(second.pipeline("matmul_f32"), VkPipeline(VK_NULL_HANDLE));
    }
    {
        std::FILE* f = std::fopen(file.c_str(), "r+b");
        ASSERT_NE(f, nullptr);
        std::fputs("garbage", f);
        std::fclose(f);
        vulkan::VulkanKernels damaged(device, pd);
        EXPECT_NE(damaged.pipeline("softmax_f32"), VkPipeline(VK_NULL_HANDLE));
    }
    api.vkDestroyDevice(device, nullptr);
    ::unsetenv("KILN_VULKAN_CACHE_DIR");
    std::filesystem::remove_all(dir);
}

#endif

#if KILN_HAS_VULKAN
// The builds of the product kernels (128x128, 64x128, 128x64 and 64x64 shared-memory tiles for GPUs, direct reads
// for CPU devices) against each other, whichever the device uses by default, so CI's lavapipe checks the
// GPU kernels too; the shapes leave partial tiles of every size along both sides. Each sums
// K products in float32 in its own order: |tiled - direct| <= 2 (K + 2) u S per element, S the sum of
// |a||b| (the op run on absolute values). A wrong index is off by O(|value|).
TEST(VulkanProducts, TiledAndDirectKernelsAgree) {
    KILN_VULKAN_OR_SKIP(gpu);
    auto& vk = static_cast<vulkan::VulkanBackend&>(*gpu);
    using P = vulkan::VulkanBackend::Products;
    const P was = vk.products();
    auto fill = [](Shape s, uint32_t seed) { return uniform_values(std::move(s), seed); };
    auto both = [&](const std::function<Tensor(P)>& run, const Tensor& scale, double k, const char* what) {
        const Tensor direct = run(P::Direct);
        for (P tiled_build : {P::Large, P::Small, P::Rows64, P::Cols64}) {
            const Tensor tiled = run(tiled_build);
            double worst = 0;
            for (int64_t i = 0; i < scale.numel(); ++i)
                worst = std::max(worst, std::fabs(double(tiled[i]) - direct[i]) /
                                            (2 * (k + 2) * std::ldexp(1.0, -24) * scale[i] + 1e-30));
            EXPECT_LE(worst, 1.0) << what << ", build " << int(tiled_build);
            const char* names[] = {"", "128x128", "64x64", "", "", "64x128", "128x64"};
            std::printf("[ vulkan ] %s: %s tiles vs direct, err/bound %.3f\n", what, names[int(tiled_build)], worst);
        }
    };
    const Tensor x = fill({1, 130, 70}, 1), w = fill({135, 70}, 2), b = fill({135}, 3), abs_b = abs_of(b);
    both([&](P build) {
        vk.set_products(build);
        const Tensor bd = b.to_device(vk, DType::F32);
        return ops::linear(x.to_device(vk, DType::F32), w.to_device(vk, DType::F32), &bd).to_host();
    }, ops::linear(abs_of(x), abs_of(w), &abs_b), 70, "linear 130x70 -> 135");
    const Tensor img = fill({2, 6, 19, 17}, 4), kern = fill({131, 6, 3, 3}, 5);
    both([&](P build) {
        vk.set_products(build);
        return ops::conv2d(img.to_device(vk, DType::F32), kern.to_device(vk, DType::F32), nullptr, 1, 1).to_host();
    }, ops::conv2d(abs_of(img), abs_of(kern), nullptr, 1, 1), 54, "conv2d 6x19x17 -> 131, 3x3");
    vk.set_products(was);
}
#endif

#if KILN_HAS_VULKAN
// The matrix-unit build (gemm_coop.glsl, VK_KHR_ or VK_NV_cooperative_matrix) against the direct kernel, both on float16
// tensors, on shapes that cut its 128x128x32 tiles and its 16x16 fragments. Inputs are float16 values, so
// every product is exact in float32; each side sums K of them in float32 in its own order, the matrix units
// possibly truncating (2^-23 per addition rather than 2^-24): (K + 2)(2^-24 + 2^-23) S, then each rounds its
// sum to float16 once (2^-11 S each). Attention's products (scores into float32, probabilities rounded to
// float16 for the weighted sum) are checked against the CPU by tests/gpu on a GPU with these units.
// Runs only on devices that have them (not lavapipe); on the KHR build, every variant too. "f16acc" sums in
// float16, each addition rounding (or truncating) to 2^-10 of a partial sum at most S, or 2^-24 absolute among
// subnormals: (K + 2)(2^-10 + 2^-24) S + K 2^-24 for the sums' term.
TEST(VulkanProducts, MatrixUnitsAgreeWithDirect) {
    KILN_VULKAN_OR_SKIP(gpu);
    auto& vk = static_cast<vulkan::VulkanBackend&>(*gpu);
    if (!vk.physical().matrix_products) GTEST_SKIP() << vk.describe().name << " has no matrix units kiln can use";
    using P = vulkan::VulkanBackend::Products;
    const P was = vk.products();
    auto fill = [](Shape s, uint32_t seed) { return uniform_values(std::move(s), seed).converted(DType::F16).to_f32(); };
    const int was_split = vk.split_k();
    const std::string was_variant = vk.matrix_variant().empty() ? "base" : vk.matrix_variant().substr(1);
    std::vector<std::string> variants{"base"};
    if (vk.physical().matrix_khr)
        for (const std::string& v : vulkan::matrix_variants())
            if (v != "f16acc" || vulkan::khr_float16_sums(vk.physical())) variants.push_back(v);
    auto both = [&](const std::function<Tensor(P)>& run, const Tensor& scale, double k, const char* what) {
        vk.set_split_k(1);
        const Tensor direct = run(P::Direct);
        for (const std::string& variant : variants) {
            vk.set_matrix_variant(variant);
            const double u = std::ldexp(1.0, -24), us = std::ldexp(1.0, -11);
            const bool f16_sums = variant == "f16acc";
            const double sums = f16_sums ? 2 * us + u : 3 * u, subnormal = f16_sums ? k * u : 0;
            for (int slices : {1, 2, 3}) {
                vk.set_split_k(slices);
                const Tensor matrix = run(P::Matrix);
                double worst = 0;
                for (int64_t i = 0; i < scale.numel(); ++i)
                    worst = std::max(worst, std::fabs(double(matrix[i]) - direct[i]) /
                                                ((k + 2) * sums * scale[i] + 2 * us * scale[i] + subnormal + 1e-30));
                EXPECT_LE(worst, 1.0) << what << ", " << slices << " slices, variant " << variant;
                std::printf("[ vulkan ] %s: matrix units (%s, %d slices of k) vs direct, err/bound %.3f\n", what,
                            variant.c_str(), slices, worst);
            }
        }
        vk.set_matrix_variant(was_variant);
    };
    // 264 outputs: whole rows of 8 float16 values (16 bytes), the last 16-wide block half past N.
    for (auto [rows, in, out] : {std::tuple{1, 16, 16}, {130, 70, 135}, {300, 320, 257}, {300, 320, 264}}) {
        const Tensor x = fill({1, rows, in}, 1), w = fill({out, in}, 2), b = fill({out}, 3), abs_b = abs_of(b);
        const std::string what = "linear " + std::to_string(rows) + "x" + std::to_string(in) + " -> " + std::to_string(out);
        both([&](P build) {
            vk.set_products(build);
            const Tensor bd = b.to_device(vk, DType::F16);
            return ops::linear(x.to_device(vk, DType::F16), w.to_device(vk, DType::F16), &bd).to_host();
        }, ops::linear(abs_of(x), abs_of(w), &abs_b), in, what.c_str());
    }
    // 16 channels: k = 144, more than one step of 64 (2 slices: 96 and 48, the first ending inside a step).
    const Tensor img = fill({2, 16, 19, 17}, 4), kern = fill({131, 16, 3, 3}, 5);
    both([&](P build) {
        vk.set_products(build);
        return ops::conv2d(img.to_device(vk, DType::F16), kern.to_device(vk, DType::F16), nullptr, 1, 1).to_host();
    }, ops::conv2d(abs_of(img), abs_of(kern), nullptr, 1, 1), 144, "conv2d 16x19x17 -> 131, 3x3");
    // 16x16 pixels with a bias: whole rows of 8 float16 values, and the bias in the epilogue.
    const Tensor img16 = fill({2, 16, 16, 16}, 6), kern40 = fill({40, 16, 3, 3}, 7), b40 = fill({40}, 8),
                 abs_b40 = abs_of(b40);
    both([&](P build) {
        vk.set_products(build);
        const Tensor bd = b40.to_device(vk, DType::F16);
        return ops::conv2d(img16.to_device(vk, DType::F16), kern40.to_device(vk, DType::F16), &bd, 1, 1).to_host();
    }, ops::conv2d(abs_of(img16), abs_of(kern40), &abs_b40, 1, 1), 144, "conv2d 16x16x16 -> 40, 3x3, bias");
    vk.set_products(was);
    vk.set_split_k(was_split);
}
#endif

#if KILN_HAS_VULKAN
// Split-K (VulkanDeviceOps::split_k): a product cut into slices of k, each summed into a float32 workspace
// and added by a second pass, against the same product in one slice, for every build the device runs
// (lavapipe: all three tiled/direct builds, as the other tests set them). Both sides sum K float32 products
// in their own order: |split - whole| <= 2 (K + 2) u S per element, S the sum of |a||b| (+ |bias|, added once
// by either side). A slice summed twice, skipped, or a bias added per slice is off by O(|value|).
TEST(VulkanProducts, SplitKAgreesWithOneSlice) {
    KILN_VULKAN_OR_SKIP(gpu);
    auto& vk = static_cast<vulkan::VulkanBackend&>(*gpu);
    using P = vulkan::VulkanBackend::Products;
    const P was = vk.products();
    const int was_split = vk.split_k();
    auto fill = [](Shape s, uint32_t seed) { return uniform_values(std::move(s), seed); };
    auto check = [&](const std::function<Tensor()>& run, const Tensor& scale, double k, const std::string& what) {
        for (P build : {P::Direct, P::Large, P::Small, P::Rows64, P::Cols64}) {
            vk.set_products(build);
            vk.set_split_k(1);
            const Tensor whole = run();
            for (int slices : {2, 3, 5}) {
                vk.set_split_k(slices);
                const Tensor split = run();
                double worst = 0;
                for (int64_t i = 0; i < scale.numel(); ++i)
                    worst = std::max(worst, std::fabs(double(split[i]) - whole[i]) /
                                                (2 * (k + 2) * std::ldexp(1.0, -24) * scale[i] + 1e-30));
                EXPECT_LE(worst, 1.0) << what << ", " << slices << " slices, build " << int(build);
            }
        }
    };
    const Tensor x = fill({1, 37, 300}, 1), w = fill({45, 300}, 2), b = fill({45}, 3), abs_b = abs_of(b);
    check([&] {
        const Tensor bd = b.to_device(vk, DType::F32);
        return ops::linear(x.to_device(vk, DType::F32), w.to_device(vk, DType::F32), &bd).to_host();
    }, ops::linear(abs_of(x), abs_of(w), &abs_b), 300, "linear 37x300 -> 45 + bias");
    const Tensor img = fill({2, 16, 9, 11}, 4), kern = fill({20, 16, 3, 3}, 5), kb = fill({20}, 6), abs_kb = abs_of(kb);
    check([&] {
        const Tensor bd = kb.to_device(vk, DType::F32);
        return ops::conv2d(img.to_device(vk, DType::F32), kern.to_device(vk, DType::F32), &bd, 1, 1).to_host();
    }, ops::conv2d(abs_of(img), abs_of(kern), &abs_kb, 1, 1), 144, "conv2d 2x16x9x11 -> 20, 3x3 + bias");
    // Attention's weighted sum is a product batched over heads with k = the keys (77 here).
    const Tensor q = fill({1, 33, 80}, 7), k = fill({1, 77, 80}, 8), v = fill({1, 77, 80}, 9);
    check([&] {
        return ops::attention(q.to_device(vk, DType::F32), k.to_device(vk, DType::F32), v.to_device(vk, DType::F32), 2,
                              false)
            .to_host();
    }, ops::attention(q, k, abs_of(v), 2, false), 77, "attention 33x77, 2 heads of 40");
    vk.set_products(was);
    vk.set_split_k(was_split);
}
#endif

#if KILN_HAS_VULKAN
// Each form of attention on this device, against the host's float32 attention under the bound
// tests/gpu/device_ops_test.cpp derives (scores summed over d, weights over lk keys). The products are the
// default where there are no matrix units, so each form is forced here (Matrix, flash attention on the matrix
// units, runs only for float16 on devices with the KHR matrix kernels, else it is the products again):
// shapes that cut the flash kernels' 128- and 64-query blocks, 64-, 32-, 16- and 8-key tiles and their builds' columns
// (d 40, 80, 160, 64, 120; 64, 120 and 35 for each build of the matrix kernel, 35 without the kernels' wide loads), causal masks
// across tiles and query blocks, and packed q | k | v read in place.
TEST(VulkanAttention, FlashKernelAndProductsAgreeWithTheHost) {
    KILN_VULKAN_OR_SKIP(gpu);
    auto& vk = static_cast<vulkan::VulkanBackend&>(*gpu);
    using A = vulkan::VulkanBackend::Attention;
    const A was = vk.attention();
    struct Case {
        int b, lq, lk, heads, d;
        bool causal;
    };
    const int was_queries = vk.flash_queries();
    for (DType t : {DType::F32, DType::F16}) {
        if (t == DType::F16 && !vk.supports(DType::F16)) continue;
        for (Case c : {Case{2, 70, 129, 2, 40, false}, Case{1, 65, 65, 1, 80, true}, Case{1, 66, 70, 1, 160, false},
                       Case{1, 33, 77, 2, 64, false}, Case{1, 17, 100, 1, 120, true}, Case{2, 40, 50, 3, 35, false},
                       Case{1, 200, 200, 2, 64, true}, Case{2, 150, 90, 1, 40, false}}) {
            const int hd = c.heads * c.d;
            const Tensor q = kiln::test::random_in({c.b, c.lq, hd}, 1, t), k = kiln::test::random_in({c.b, c.lk, hd}, 2, t),
                         v = kiln::test::random_in({c.b, c.lk, hd}, 3, t);
            const Tensor ref = ops::attention(q, k, v, c.heads, c.causal);
            const Tensor scale = ops::attention(q, k, kiln::test::abs_of(v), c.heads, c.causal);
            const double k_len = (c.d + 2) * std::sqrt(double(c.d)) + c.lk;
            const std::string tag = std::to_string(c.lq) + "x" + std::to_string(c.lk) + " d" + std::to_string(c.d) +
                                    (c.causal ? " causal" : "");
            // Flash twice: 64 queries a workgroup, then 128 (two row groups, where the head has up to 64 dimensions)
            for (auto [form, queries] : {std::pair{A::Flash, 64}, {A::Flash, 128}, {A::Products, 0}, {A::Matrix, 0}}) {
                if (form == A::Matrix && !vk.physical().matrix_khr) continue;  // there it is the products again
                vk.set_flash_queries(queries);
                vk.set_attention(form);
                const std::string what =
                    std::string(form == A::Flash ? (queries == 128 ? "flash128 " : "flash ")
                                                 : form == A::Matrix ? "matrix " : "products ") +
                    tag;
                kiln::test::expect_close(
                    ops::attention(q.to_device(vk, t), k.to_device(vk, t), v.to_device(vk, t), c.heads, c.causal).to_host(),
                    ref, scale, k_len, t, 2, what);
                if (c.causal || c.lq != c.lk) continue;
                const Tensor qkv =
                    ops::concat_channels(ops::concat_channels(q.reshaped({c.b * c.lq, hd, 1}), k.reshaped({c.b * c.lq, hd, 1})),
                                         v.reshaped({c.b * c.lq, hd, 1}))
                        .reshaped({c.b, c.lq, 3 * hd});
                kiln::test::expect_close(ops::attention_qkv(qkv.to_device(vk, t), c.heads).to_host(), ref, scale, k_len, t, 2,
                                         what + " qkv");
            }
        }
    }
    vk.set_attention(was);
    vk.set_flash_queries(was_queries);
}

// Scores that grow from one block of keys to the next (key j's row of k times 1 + j / 8, up to 26x): the matrix flash
// kernel moves a row's reference maximum only when it grows past 2^8 (flash_attention_coop.comp), so these rows take
// its rescaling path several times, where the cases above (scores within a few units) never do. Each form against
// the host, the scores' error bound grown by the same factor.
TEST(VulkanAttention, ScoresGrowingAcrossKeyBlocksAgreeWithTheHost) {
    KILN_VULKAN_OR_SKIP(gpu);
    auto& vk = static_cast<vulkan::VulkanBackend&>(*gpu);
    using A = vulkan::VulkanBackend::Attention;
    const A was = vk.attention();
    const int b = 1, lq = 70, lk = 200, heads = 2, d = 40, hd = heads * d;
    const double grows = 1.0 + (lk - 1) / 8.0;
    for (DType t : {DType::F32, DType::F16}) {
        if (t == DType::F16 && !vk.supports(DType::F16)) continue;
        const Tensor q = kiln::test::random_in({b, lq, hd}, 4, t), v = kiln::test::random_in({b, lk, hd}, 6, t);
        Tensor k = kiln::test::random_in({b, lk, hd}, 5, DType::F32);
        for (int64_t j = 0; j < lk; ++j)
            for (int64_t c = 0; c < hd; ++c) k.data()[j * hd + c] *= float(1.0 + j / 8.0);
        k = k.converted(t).to_f32();  // values the device's dtype holds, so that the host multiplies the same ones
        for (bool causal : {false, true}) {
            const Tensor ref = ops::attention(q, k, v, heads, causal);
            const Tensor scale = ops::attention(q, k, kiln::test::abs_of(v), heads, causal);
            const double k_len = (d + 2) * std::sqrt(double(d)) * grows + lk;
            for (A form : {A::Flash, A::Products, A::Matrix}) {
                if (form == A::Matrix && !vk.physical().matrix_khr) continue;
                vk.set_attention(form);
                const std::string what = std::string(form == A::Flash ? "flash " : form == A::Matrix ? "matrix " : "products ") +
                                         "growing scores" + (causal ? " causal" : "");
                kiln::test::expect_close(
                    ops::attention(q.to_device(vk, t), k.to_device(vk, t), v.to_device(vk, t), heads, causal).to_host(), ref,
                    scale, k_len, t, 2, what);
            }
        }
    }
    vk.set_attention(was);
}
#endif

#if KILN_HAS_VULKAN
// GPU time per op (vulkan_timeline.h): with an observer that wants device spans, each op call on the device
// gets one span from its timestamps, reported when the host waits; ops of a recorded call too (they run
// eagerly while spans are wanted). Checks one span per host op call of each kind, top-level spans one after
// another, and every span inside the host's wall time of the region.
struct SpanRecorder : ops::OpObserver {
    std::map<ops::OpKind, int> host_calls;
    std::vector<ops::DeviceOpSpan> spans;
    std::string device;
    void begin(ops::OpKind kind, double) override { ++host_calls[kind]; }
    void end(ops::OpKind) override {}
    bool wants_device_spans() const override { return true; }
    void device_spans(const std::string& d, const std::vector<ops::DeviceOpSpan>& s) override {
        device = d;
        spans.insert(spans.end(), s.begin(), s.end());
    }
};

TEST(VulkanTimeline, OneSpanPerOpCallInsideTheWallTime) {
    KILN_VULKAN_OR_SKIP(gpu);
    auto& vk = static_cast<vulkan::VulkanBackend&>(*gpu);
    const Tensor x = uniform_values({1, 40, 64}, 1).to_device(vk, DType::F32);
    const Tensor w = uniform_values({48, 64}, 2).to_device(vk, DType::F32);
    const Tensor w2 = uniform_values({32, 48}, 3).to_device(vk, DType::F32);
    vk.synchronize();
    auto now = [] {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
    };
    SpanRecorder rec;
    ops::set_op_observer(&rec);
    const int64_t t0 = now();
    Tensor y = ops::linear(x, w, nullptr);
    ops::scale_(y, 0.5f);
    Tensor a = ops::attention(y, y, y, 4, false);
    // A recorded call, twice (the second would replay a recording without an observer).
    for (int i = 0; i < 2; ++i)
        (void)vk.run_recorded("timeline-test", {&a}, [&](const std::vector<const Tensor*>& in) {
            return ops::linear(*in[0], w2, nullptr);
        });
    vk.synchronize();
    const int64_t t1 = now();
    ops::set_op_observer(nullptr);
    ASSERT_EQ(rec.device, device_name(vk.device()));
    std::map<ops::OpKind, int> gpu_calls;
    for (const ops::DeviceOpSpan& s : rec.spans) ++gpu_calls[s.kind];
    EXPECT_EQ(gpu_calls, rec.host_calls);
    EXPECT_EQ(gpu_calls[ops::OpKind::Linear], 3);
    const int64_t slack = 2'000'000;  // 2 ms: the wait's wake-up, by which the spans are placed late
    int64_t top_end = t0;
    for (const ops::DeviceOpSpan& s : rec.spans) {
        EXPECT_GE(s.duration_ns, 0);
        EXPECT_LE(s.self_ns, s.duration_ns);
        EXPECT_GE(s.start_ns + slack, t0);
        EXPECT_LE(s.start_ns + s.duration_ns, t1 + slack);
        if (s.depth == 0) {
            EXPECT_GE(s.start_ns, top_end) << "top-level spans overlap";
            top_end = s.start_ns + s.duration_ns;
        }
    }
}
#endif

#if KILN_HAS_VULKAN
// Sets VulkanMemory's way of serving large requests (KILN_VULKAN_SPLIT_BLOCKS) for one test, back as it was after:
// each test of the allocator's policy states the one it checks, whatever the environment asked.
struct SplitBlocksFor {
    vulkan::VulkanBackend& vk;
    SplitPolicy was;
    SplitBlocksFor(vulkan::VulkanBackend& b, bool on) : vk(b), was(b.memory().split_policy()) {
        vk.memory().set_split_policy(on ? SplitPolicy::Always : SplitPolicy::Never);
    }
    ~SplitBlocksFor() { vk.memory().set_split_policy(was); }
};

// --vram on Vulkan (VulkanMemory::set_limit): what kiln holds stays under the cap, cache included; past it the
// cached dedicated allocations go back first (so a request that fits once they are gone succeeds), then the
// request is OutOfMemory naming the cap; lifting the cap lets it through.
TEST(VulkanMemoryLimit, HoldsAndGivesTheCacheBackFirst) {
    KILN_VULKAN_OR_SKIP(gpu);
    auto& vk = static_cast<vulkan::VulkanBackend&>(*gpu);
    const SplitBlocksFor whole(vk, false);
    vk.synchronize();
    vk.release_cached_memory();  // no free slab left by an earlier test to give back for the second request
    constexpr int64_t kMiB = int64_t(1) << 20;
    // Dedicated allocations (8 MiB and more): a cached 24 MiB block, then a cap with room for 16 MiB only.
    void* cached = vk.allocate(24 * kMiB);
    vk.deallocate(cached);
    const int64_t base = vk.reserved_bytes();
    ASSERT_TRUE(vk.set_memory_limit(base - 24 * kMiB + 16 * kMiB));
    void* fits = vk.allocate(16 * kMiB);  // only after the cached 24 MiB went back
    EXPECT_LE(vk.reserved_bytes(), base - 24 * kMiB + 16 * kMiB);
    try {
        (void)vk.allocate(16 * kMiB);
        ADD_FAILURE() << "an allocation past the cap was granted";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory);
        EXPECT_NE(std::string(e.what()).find("--vram"), std::string::npos) << e.what();
    }
    ASSERT_TRUE(vk.set_memory_limit(0));
    void* more = vk.allocate(16 * kMiB);
    vk.deallocate(more);
    vk.deallocate(fits);
    vk.release_cached_memory();
}

// Only the cached allocations a request needs go back (session 27; before, all of them): cached 40 and 24 MiB, a cap
// 20 MiB short of a 16 MiB request: the 24 MiB one is the smallest that covers that alone, so the 40 MiB one stays
// cached and serves the next 40 MiB request with nothing allocated.
TEST(VulkanMemoryLimit, GivesBackOnlyWhatARequestNeeds) {
    KILN_VULKAN_OR_SKIP(gpu);
    auto& vk = static_cast<vulkan::VulkanBackend&>(*gpu);
    const SplitBlocksFor whole(vk, false);
    vk.synchronize();
    vk.release_cached_memory();
    constexpr int64_t kMiB = int64_t(1) << 20;
    void* forty = vk.allocate(40 * kMiB);
    void* twenty_four = vk.allocate(24 * kMiB);
    vk.deallocate(forty);
    vk.deallocate(twenty_four);
    const int64_t base = vk.reserved_bytes();
    const AllocatorCounts before = vk.allocator_counts();
    ASSERT_TRUE(vk.set_memory_limit(base + 16 * kMiB - 20 * kMiB));
    void* sixteen = vk.allocate(16 * kMiB);
    EXPECT_EQ(vk.reserved_bytes(), base - 24 * kMiB + 16 * kMiB);
    EXPECT_EQ(vk.allocate(40 * kMiB), forty);
    EXPECT_EQ(vk.reserved_bytes(), base - 24 * kMiB + 16 * kMiB);
    // Counted for --profile (core/allocator_counts.h): one vkAllocateMemory, one give-back of one allocation.
    const AllocatorCounts counted = vk.allocator_counts().since(before);
    EXPECT_EQ(counted.device_allocations, 1);
    EXPECT_EQ(counted.give_backs, 1);
    EXPECT_EQ(counted.blocks_given_back, 1);
    ASSERT_TRUE(vk.set_memory_limit(0));
    vk.deallocate(forty);
    vk.deallocate(sixteen);
    vk.release_cached_memory();
}

// Small requests under a cap that admits no new slab, falling sizes, each size until refused: every block they get
// is its own. (Session 29: a refused slab left the old slab's tail both cached and to its bump pointer, two tensors
// in the same bytes, a wrong VAE decode after one that ran out. Slabs have no bump pointer since session 30.)
TEST(VulkanMemoryLimit, ARefusedSlabLeavesItsTailServedOnce) {
    KILN_VULKAN_OR_SKIP(gpu);
    auto& vk = static_cast<vulkan::VulkanBackend&>(*gpu);
    vk.synchronize();
    vk.release_cached_memory();  // no whole free slab to give back for a new one under the cap
    std::vector<std::pair<uintptr_t, int64_t>> blocks;  // address, bytes
    // An odd size first (a slab there is, then), so that the slab's free room, when the 64 KiB requests run out, is
    // not a multiple of them; the cap: what is held now, so that no new slab comes.
    blocks.emplace_back(reinterpret_cast<uintptr_t>(vk.allocate(1280)), 1280);
    ASSERT_GT(vk.reserved_bytes(), 0);
    ASSERT_TRUE(vk.set_memory_limit(vk.reserved_bytes()));
    int refusals = 0;
    for (int64_t size = 64 << 10; size >= 256; size /= 2) {
        for (int n = 0; n < 100000; ++n) {
            try {
                blocks.emplace_back(reinterpret_cast<uintptr_t>(vk.allocate(size)), size);
            } catch (const Error& e) {
                EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory) << e.what();
                ++refusals;
                break;
            }
        }
    }
    ASSERT_TRUE(vk.set_memory_limit(0));
    EXPECT_GT(refusals, 0) << "the cap refused no slab: the test saw nothing";
    std::sort(blocks.begin(), blocks.end());
    for (size_t i = 1; i < blocks.size(); ++i)
        EXPECT_LE(blocks[i - 1].first + uintptr_t(blocks[i - 1].second), blocks[i].first)
            << "two blocks share bytes: " << blocks[i - 1].second << " at " << blocks[i - 1].first << ", "
            << blocks[i].second << " at " << blocks[i].first;
    for (const auto& [address, bytes] : blocks) vk.deallocate(reinterpret_cast<void*>(address));
}

// Small blocks (under 4 MiB) freed merge back into their slab, and a slab whose blocks are all free goes back to
// the driver when a request under the cap needs its room (session 30: they stayed cached in pieces, so a component's
// weights moved off the device left memory no larger request could have: an SD 1.5 q4_K decode under --vram 1G ran
// out with 119 MiB of such pieces held). Slabs filled with 256 KiB blocks, freed, then one request as large as them.
TEST(VulkanMemoryLimit, FreedSmallBlocksGiveTheirSlabsBack) {
    KILN_VULKAN_OR_SKIP(gpu);
    auto& vk = static_cast<vulkan::VulkanBackend&>(*gpu);
    vk.synchronize();
    vk.release_cached_memory();
    constexpr int64_t kMiB = int64_t(1) << 20;
    const int64_t base = vk.reserved_bytes();
    std::vector<void*> small;
    while (vk.reserved_bytes() < base + 100 * kMiB) small.push_back(vk.allocate(256 << 10));
    const int64_t slabs = vk.reserved_bytes() - base;
    if (vk.memory().max_allocation() > 0 && vk.memory().max_allocation() < slabs - 4 * kMiB) {
        for (void* p : small) vk.deallocate(p);
        GTEST_SKIP() << "one allocation may not be as large as the slabs here (KILN_VULKAN_MAX_ALLOCATION)";
    }
    // Freed in an interleaved order, so that merging has to join neighbours freed apart.
    for (size_t i = 0; i < small.size(); i += 2) vk.deallocate(small[i]);
    for (size_t i = 1; i < small.size(); i += 2) vk.deallocate(small[i]);
    ASSERT_TRUE(vk.set_memory_limit(base + slabs));
    const AllocatorCounts before = vk.allocator_counts();
    void* large = nullptr;
    EXPECT_NO_THROW(large = vk.allocate(slabs - 4 * kMiB)) << "the freed slabs stayed";
    EXPECT_GT(vk.allocator_counts().since(before).blocks_given_back, 0);
    EXPECT_LE(vk.reserved_bytes(), base + slabs);
    ASSERT_TRUE(vk.set_memory_limit(0));
    if (large) vk.deallocate(large);
    vk.release_cached_memory();
}

// Blocks cut from larger ones (VulkanMemory's default; KILN_VULKAN_SPLIT_BLOCKS): at the cap a request is cut from
// a larger free allocation instead of one going back to the driver; the parts hold their own values, merge when
// freed, and an allocation whose parts are all free is what goes back.
TEST(VulkanMemoryLimit, SplitBlocksAreCutAtTheCapAndMergeWhenFreed) {
    KILN_VULKAN_OR_SKIP(gpu);
    auto& vk = static_cast<vulkan::VulkanBackend&>(*gpu);
    vk.synchronize();
    vk.release_cached_memory();
    constexpr int64_t kMiB = int64_t(1) << 20;
    const SplitBlocksFor split(vk, true);
    char* forty = static_cast<char*>(vk.allocate(40 * kMiB));
    void* twenty = vk.allocate(20 * kMiB);
    vk.deallocate(forty);
    const int64_t base = vk.reserved_bytes();
    const AllocatorCounts before = vk.allocator_counts();
    ASSERT_TRUE(vk.set_memory_limit(base + 4 * kMiB));
    char* sixteen = static_cast<char*>(vk.allocate(16 * kMiB));
    char* twenty_four = static_cast<char*>(vk.allocate(24 * kMiB));
    EXPECT_EQ(sixteen, forty);
    EXPECT_EQ(twenty_four, forty + 16 * kMiB);
    EXPECT_EQ(vk.allocator_counts().since(before).device_allocations, 0);
    EXPECT_EQ(vk.allocator_counts().since(before).give_backs, 0);
    EXPECT_EQ(vk.reserved_bytes(), base);
    const std::vector<uint8_t> ones(16 * kMiB, 1), twos(24 * kMiB, 2);
    vk.upload(sixteen, ones.data(), int64_t(ones.size()));
    vk.upload(twenty_four, twos.data(), int64_t(twos.size()));
    uint8_t edge[2] = {0, 0};
    vk.download(edge, twenty_four - 1, 2);
    EXPECT_EQ(edge[0], 1);
    EXPECT_EQ(edge[1], 2);
    vk.deallocate(sixteen);
    vk.deallocate(twenty_four);
    EXPECT_EQ(vk.allocate(40 * kMiB), forty) << "the parts merged";
    // 22 MiB with nothing free that holds it, past the cap: the 20 MiB allocation, all free, goes back.
    vk.deallocate(twenty);
    void* twenty_two = vk.allocate(22 * kMiB);
    const AllocatorCounts counted = vk.allocator_counts().since(before);
    EXPECT_EQ(counted.give_backs, 1);
    EXPECT_EQ(counted.blocks_given_back, 1);
    EXPECT_EQ(counted.device_allocations, 1);
    EXPECT_EQ(vk.reserved_bytes(), base + 2 * kMiB);
    ASSERT_TRUE(vk.set_memory_limit(0));
    vk.deallocate(twenty_two);
    vk.deallocate(forty);
    vk.release_cached_memory();
}
#endif

#if KILN_HAS_VULKAN
// The VK_KHR_cooperative_matrix kernels are compiled only where glslang 13 or later was found at configure
// time. KILN_EXPECT_VULKAN_KHR=1 (set by .ci/run, which installs one) makes their absence a failure, so a CI
// that lost the compiler cannot go green without compiling them.
TEST(VulkanMatrixKernels, KhrKernelsEmbeddedWhereExpected) {
    const char* expect = std::getenv("KILN_EXPECT_VULKAN_KHR");
    const bool embedded = vulkan::embedded_kernel("matmul_coopk_f16") && vulkan::embedded_kernel("conv2d_coopk_f16") &&
                          vulkan::embedded_kernel("matmul_scores_coopk_f16") && vulkan::embedded_kernel("matmul_pv_coopk_f16");
    if (!expect || std::string(expect) != "1") {
        if (!embedded) GTEST_SKIP() << "built without glslang 13+ (set KILN_EXPECT_VULKAN_KHR=1 to require it)";
    }
    EXPECT_TRUE(embedded) << "the VK_KHR_cooperative_matrix kernels are missing from this build (KILN_GLSLANG)";
    for (const std::string& v : vulkan::matrix_variants())  // KILN_VULKAN_COOP's, as kernels.cmake names them
        for (const char* base : {"matmul", "matmul_scores", "matmul_pv", "conv2d"})
            EXPECT_TRUE(vulkan::embedded_kernel((std::string(base) + "_coopk_" + v + "_f16").c_str())) << base << " " << v;
}

// KILN_VULKAN_COOP: "base" and the variants' names (all taken where there are no matrix units), else an error.
TEST(VulkanSettings, MatrixVariantNames) {
    KILN_VULKAN_OR_SKIP(gpu);
    auto& vk = static_cast<vulkan::VulkanBackend&>(*gpu);
    const std::string was = vk.matrix_variant().empty() ? "base" : vk.matrix_variant().substr(1);
    vk.set_matrix_variant("base");
    EXPECT_EQ(vk.matrix_variant(), "");
    for (const std::string& v : vulkan::matrix_variants())
        if (!vk.physical().matrix_products) EXPECT_EQ((vk.set_matrix_variant(v), vk.matrix_variant()), "_" + v);
    for (const char* bad : {"k32", "K64", " base"}) {
        try {
            vk.set_matrix_variant(bad);
            ADD_FAILURE() << bad << " was taken";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("KILN_VULKAN_COOP"), std::string::npos) << e.what();
        }
    }
    vk.set_matrix_variant(was);
}
#endif

#if KILN_HAS_VULKAN
// The developer settings for the product kernels: every documented value, and a clear error for any other.
TEST(VulkanSettings, ProductBuildsAndSplitKFromTheEnvironment) {
    using P = vulkan::VulkanBackend::Products;
    EXPECT_EQ(vulkan::products_from_env(nullptr, false), P::Measured);
    EXPECT_EQ(vulkan::products_from_env("", true), P::Direct);
    EXPECT_EQ(vulkan::products_from_env("measured", true), P::Measured);
    EXPECT_EQ(vulkan::products_from_env("matrix", false), P::Matrix);
    EXPECT_EQ(vulkan::products_from_env("small", false), P::Small);
    EXPECT_EQ(vulkan::products_from_env("rows64", false), P::Rows64);
    EXPECT_EQ(vulkan::products_from_env("cols64", false), P::Cols64);
    EXPECT_EQ(vulkan::split_k_from_env(nullptr), 0);
    EXPECT_EQ(vulkan::split_k_from_env("1"), 1);
    EXPECT_EQ(vulkan::split_k_from_env("16"), 16);
    for (const char* bad : {"coop", "LARGE", " large"}) {
        try {
            vulkan::products_from_env(bad, false);
            ADD_FAILURE() << bad << " was taken";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
            EXPECT_NE(std::string(e.what()).find("KILN_VULKAN_GEMM"), std::string::npos) << e.what();
        }
    }
    using A = vulkan::VulkanBackend::Attention;
    EXPECT_EQ(vulkan::attention_from_env(nullptr, false), A::Matrix);
    EXPECT_EQ(vulkan::attention_from_env("", false), A::Matrix);
    EXPECT_EQ(vulkan::attention_from_env(nullptr, true), A::Products);  // a device that runs on the CPU
    EXPECT_EQ(vulkan::attention_from_env("matrix", true), A::Matrix);
    EXPECT_EQ(vulkan::attention_from_env("flash", false), A::Flash);
    EXPECT_EQ(vulkan::attention_from_env("products", false), A::Products);
    for (const char* bad : {"Flash", "Matrix", "flash "}) {
        try {
            vulkan::attention_from_env(bad, false);
            ADD_FAILURE() << bad << " was taken";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
            EXPECT_NE(std::string(e.what()).find("KILN_VULKAN_ATTENTION"), std::string::npos) << e.what();
        }
    }
    EXPECT_EQ(vulkan::flash_queries_from_env(nullptr), 0);
    EXPECT_EQ(vulkan::flash_queries_from_env(""), 0);
    EXPECT_EQ(vulkan::flash_queries_from_env("64"), 64);
    EXPECT_EQ(vulkan::flash_queries_from_env("128"), 128);
    for (const char* bad : {"32", "256", "128 ", "auto"}) {
        try {
            vulkan::flash_queries_from_env(bad);
            ADD_FAILURE() << bad << " was taken";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
            EXPECT_NE(std::string(e.what()).find("KILN_VULKAN_FLASH_QUERIES"), std::string::npos) << e.what();
        }
    }
    EXPECT_EQ(vulkan::matrix_extension_from_env(nullptr), "");
    EXPECT_EQ(vulkan::matrix_extension_from_env("khr"), "khr");
    EXPECT_EQ(vulkan::matrix_extension_from_env("nv"), "nv");
    EXPECT_EQ(vulkan::matrix_extension_from_env("off"), "off");
    for (const char* bad : {"KHR", "both", "nv "}) {
        try {
            vulkan::matrix_extension_from_env(bad);
            ADD_FAILURE() << bad << " was taken";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
            EXPECT_NE(std::string(e.what()).find("KILN_VULKAN_MATRIX"), std::string::npos) << e.what();
        }
    }
    for (const char* bad : {"abc", "-1", "65", "4x", "1.5"}) {
        try {
            vulkan::split_k_from_env(bad);
            ADD_FAILURE() << bad << " was taken";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
            EXPECT_NE(std::string(e.what()).find("KILN_VULKAN_SPLIT_K"), std::string::npos) << e.what();
        }
    }
}

// Copies ahead (vulkan_transfer.h): KILN_VULKAN_UPLOAD_AHEAD as CUDA's KILN_CUDA_UPLOAD_AHEAD, the queue setting, and
// the fallback from a queue the device lacks to the next one down.
TEST(VulkanSettings, UploadAheadAndItsQueue) {
    EXPECT_TRUE(vulkan::upload_ahead_from_env(nullptr));
    EXPECT_TRUE(vulkan::upload_ahead_from_env(""));
    EXPECT_TRUE(vulkan::upload_ahead_from_env("1"));
    EXPECT_FALSE(vulkan::upload_ahead_from_env("0"));
    for (const char* bad : {"off", "2", "yes"}) {
        try {
            vulkan::upload_ahead_from_env(bad);
            ADD_FAILURE() << bad << " was taken";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
            EXPECT_NE(std::string(e.what()).find(std::string("KILN_VULKAN_UPLOAD_AHEAD=") + bad), std::string::npos);
        }
    }
    using Q = vulkan::TransferQueue;
    EXPECT_EQ(vulkan::transfer_queue_from_env(nullptr), Q::Auto);
    EXPECT_EQ(vulkan::transfer_queue_from_env("family"), Q::Family);
    EXPECT_EQ(vulkan::transfer_queue_from_env("second"), Q::Second);
    EXPECT_EQ(vulkan::transfer_queue_from_env("same"), Q::Same);
    for (const char* bad : {"auto", "Same", "compute"}) {
        try {
            vulkan::transfer_queue_from_env(bad);
            ADD_FAILURE() << bad << " was taken";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
            EXPECT_NE(std::string(e.what()).find("KILN_VULKAN_TRANSFER_QUEUE"), std::string::npos) << e.what();
        }
    }
    vulkan::TransferQueues one;  // lavapipe's: one queue of one family
    vulkan::TransferQueues nvidia;  // a transfer-only family, and many queues of the compute family
    nvidia.family = 1, nvidia.compute_queues = 2;
    for (Q q : {Q::Auto, Q::Family, Q::Second, Q::Same}) EXPECT_EQ(one.resolve(q), Q::Same);
    EXPECT_EQ(nvidia.resolve(Q::Auto), Q::Family);
    EXPECT_EQ(nvidia.resolve(Q::Second), Q::Second);
    EXPECT_EQ(nvidia.resolve(Q::Same), Q::Same);
    nvidia.family = -1;
    EXPECT_EQ(nvidia.resolve(Q::Family), Q::Second);
}
#endif

#if KILN_HAS_VULKAN
// Vulkan's allocation limits (docs/VULKAN.md), forced low as KILN_VULKAN_MAX_ALLOCATION / _BINDING do: past them,
// OutOfMemory naming the setting; restored (and the cache emptied) after each test.
namespace {
struct ForcedLimits {
    vulkan::VulkanMemory& m;
    ForcedLimits(vulkan::VulkanBackend& vk, int64_t allocation, int64_t binding) : m(vk.memory()) {
        vk.synchronize();
        m.release_cached();  // no cached block past the limit is handed out again
        if (allocation > 0) m.set_max_allocation(allocation);
        m.set_max_binding(binding);
    }
    ~ForcedLimits() {
        m.set_max_allocation(m.driver_max_allocation());
        m.set_max_binding(0);
        m.release_cached();
    }
};

void expect_out_of_memory_naming(const std::function<void()>& f, const std::string& limit) {
    try {
        f();
        ADD_FAILURE() << "no error; expected OutOfMemory naming " << limit;
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory) << e.what();
        EXPECT_NE(std::string(e.what()).find(limit), std::string::npos) << e.what();
    }
}
}  // namespace

TEST(VulkanAllocationLimits, PastTheLimitsIsOutOfMemoryNamingThem) {
    KILN_VULKAN_OR_SKIP(gpu);
    auto& vk = static_cast<vulkan::VulkanBackend&>(*gpu);
    constexpr int64_t kMiB = int64_t(1) << 20;
    EXPECT_GT(vk.memory().driver_max_allocation(), 0) << "maxMemoryAllocationSize is Vulkan 1.1";
    EXPECT_EQ(vk.max_binding_bytes(4), vulkan::kMaxKernelValues * 4);  // unforced: the 32-bit indices
    {
        ForcedLimits forced(vk, 8 * kMiB, 0);
        EXPECT_EQ(vk.max_allocation_bytes(), 8 * kMiB);
        expect_out_of_memory_naming([&] { (void)Tensor::empty_on(vk, {2 * kMiB + 1}, DType::F32); },
                                    "KILN_VULKAN_MAX_ALLOCATION");
        vk.deallocate(vk.allocate(8 * kMiB - 4096));  // its granule is not past the limit
        Tensor small = Tensor::empty_on(vk, {1000}, DType::F32);  // a slab within the limit
    }
    Tensor x_host = uniform_values({2, 1, 256, 1024}, 7);  // 2 MiB of float32
    Tensor x = x_host.to_device(vk, DType::F32);
    {
        ForcedLimits forced(vk, 0, kMiB);
        EXPECT_EQ(vk.max_allocation_bytes(), kMiB);
        expect_out_of_memory_naming([&] { ops::scale_(x, 2.0f); }, "KILN_VULKAN_MAX_BINDING");
    }
    ops::scale_(x, 2.0f);  // the refused call changed nothing; lifted, the limit lets it run
    const Tensor after = x.to_host();
    for (int64_t i = 0; i < after.numel(); ++i) ASSERT_EQ(after[i], 2.0f * x_host[i]) << i;
    ::setenv("KILN_TEST_SIZE", "64M", 1);
    EXPECT_EQ(vulkan::byte_size_from_env("KILN_TEST_SIZE"), 64 * kMiB);
    ::setenv("KILN_TEST_SIZE", "64MB", 1);
    EXPECT_THROW((void)vulkan::byte_size_from_env("KILN_TEST_SIZE"), Error);
    ::unsetenv("KILN_TEST_SIZE");
}

// A 128x128 decode on the fixture VAE needs a 1 MiB tensor whole: under 512 KiB `auto` runs in bands, within the
// tiled bound of the CPU's untiled decode (model_conformance_test.cpp: 1.5 x float32's); `off` is the error.
TEST(VulkanAllocationLimits, VaeDecodeRunsInBandsWithinTheLimit) {
    KILN_VULKAN_OR_SKIP(gpu);
    auto& vk = static_cast<vulkan::VulkanBackend&>(*gpu);
    LoadOptions on_gpu;
    on_gpu.device = vk.device();
    on_gpu.precision = DType::F32;
    const std::string path = test::data_path("sd15-mini/diffusers");
    const StableDiffusionModel cpu = load_model(path, LoadOptions{}), dev = load_model(path, on_gpu);
    const Tensor latents = uniform_values({1, 4, 16, 16}, 11), want = cpu.vae->decode(latents);
    ASSERT_EQ(largest_vae_decode_tensor_bytes(dev, 128, 128, 1), 1 << 20) << "the fixture changed: new size";
    ForcedLimits forced(vk, 1 << 19, 0);
    std::string notice;
    const Tensor got = decode_latents(dev, latents, VaeTiling::Auto, [&](const std::string& l) { notice += l; });
    EXPECT_NE(notice.find("more than one allocation may be"), std::string::npos) << notice;
    const double err = test::relative_error(got, want), l2 = test::relative_l2_error(got, want), bound = 1.5 * 2e-5;
    std::printf("[ vulkan ] VAE decode in bands under a 512 KiB allocation limit: %.2e (L2 %.2e), bound %.1e\n", err,
                l2, bound);
    EXPECT_LT(err, bound);
    EXPECT_LT(l2, bound);
    expect_out_of_memory_naming([&] { (void)decode_latents(dev, latents, VaeTiling::Off, nullptr); },
                                "KILN_VULKAN_MAX_ALLOCATION");
}
#endif
