// Vulkan's allocation limits (docs/VULKAN.md, "Allocation limits"): one allocation past maxMemoryAllocationSize
// and a kernel operand past what the kernels' 32-bit indices reach are OutOfMemory errors naming the limit, and
// the VAE decode's `auto` tiling keeps every tensor within them. The limits are forced low here (as
// KILN_VULKAN_MAX_ALLOCATION / KILN_VULKAN_MAX_BINDING do), so lavapipe runs what a driver capping one
// allocation at 2 or 4 GiB does with SDXL at 2048x2048.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/fixtures.h"
#include "core/tensor.h"
#include "gpu/vulkan_test_device.h"
#include "kiln/error.h"
#include "ops/ops.h"
#include "pipeline/generate.h"
#include "pipeline/vae_tiling.h"
#if KILN_HAS_VULKAN
#include "backends/vulkan/vulkan_backend.h"
#endif

using namespace kiln;

#if KILN_HAS_VULKAN
namespace {

constexpr int64_t kMiB = int64_t(1) << 20;

// Forces the backend's limits for one test and restores the driver's (and no forced binding limit) after it.
class ForcedLimits {
public:
    ForcedLimits(vulkan::VulkanBackend& vk, int64_t allocation, int64_t binding) : memory_(vk.memory()) {
        vk.synchronize();
        memory_.release_cached();  // no cached block larger than the forced limit is handed out again
        if (allocation > 0) memory_.set_max_allocation(allocation);
        memory_.set_max_binding(binding);
    }
    ~ForcedLimits() {
        memory_.set_max_allocation(memory_.driver_max_allocation());
        memory_.set_max_binding(0);
        memory_.release_cached();  // the next test starts without this one's cached blocks
    }
    ForcedLimits(const ForcedLimits&) = delete;
    ForcedLimits& operator=(const ForcedLimits&) = delete;

private:
    vulkan::VulkanMemory& memory_;
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

TEST(VulkanAllocationLimits, AnAllocationPastTheLimitIsOutOfMemoryNamingIt) {
    KILN_VULKAN_OR_SKIP(gpu);
    auto& vk = static_cast<vulkan::VulkanBackend&>(*gpu);
    EXPECT_GT(vk.memory().driver_max_allocation(), 0) << "the driver states maxMemoryAllocationSize (Vulkan 1.1)";
    ForcedLimits forced(vk, 8 * kMiB, 0);
    EXPECT_EQ(vk.max_allocation_bytes(), 8 * kMiB);
    expect_out_of_memory_naming([&] { (void)vk.allocate(8 * kMiB + 1); }, "KILN_VULKAN_MAX_ALLOCATION");
    expect_out_of_memory_naming([&] { (void)Tensor::empty_on(vk, {3 * kMiB}, DType::F32); },
                                "KILN_VULKAN_MAX_ALLOCATION");
    // Exactly the limit fits (the allocator's rounding to its granules stops at the limit), and so do small
    // tensors, cut from slabs no larger than the limit.
    void* p = vk.allocate(8 * kMiB);
    vk.deallocate(p);
    void* q = vk.allocate(8 * kMiB - 4096);
    vk.deallocate(q);
    Tensor small = Tensor::empty_on(vk, {1000}, DType::F32);
    vk.synchronize();
}

TEST(VulkanAllocationLimits, AKernelOperandPastTheBindingLimitIsCaught) {
    KILN_VULKAN_OR_SKIP(gpu);
    auto& vk = static_cast<vulkan::VulkanBackend&>(*gpu);
    // Without a forced limit an operand may span 2^32 values less the grid step, more than any allocation.
    EXPECT_EQ(vk.max_binding_bytes(4), vulkan::kMaxKernelValues * 4);
    Tensor x_host({2, 1, 256, 1024});  // 2 MiB of float32
    for (int64_t i = 0; i < x_host.numel(); ++i) x_host[i] = float(i % 97) / 97.0f;
    Tensor x = x_host.to_device(vk, DType::F32);
    {
        ForcedLimits forced(vk, 0, 1 * kMiB);
        EXPECT_EQ(vk.max_allocation_bytes(), 1 * kMiB);
        expect_out_of_memory_naming([&] { ops::scale_(x, 2.0f); }, "KILN_VULKAN_MAX_BINDING");
        // Half of it, a view of its first values: within the limit, and computed.
        Tensor half = Tensor::empty_on(vk, {1, 1, 256, 512}, DType::F32);
        vk.copy(half.device_data(), x.device_data(), half.numel() * 4);
        ops::scale_(half, 2.0f);
        const Tensor back = half.to_host();
        for (int64_t i = 0; i < back.numel(); ++i) ASSERT_EQ(back[i], 2.0f * x_host[i]) << i;
    }
    // The failed call changed nothing, and after the limit is lifted the same call runs.
    ops::scale_(x, 2.0f);
    const Tensor after = x.to_host();
    for (int64_t i = 0; i < after.numel(); ++i) ASSERT_EQ(after[i], 2.0f * x_host[i]) << i;
}

TEST(VulkanAllocationLimits, ByteSizeSettingsAreParsedOrRefused) {
    ::setenv("KILN_TEST_SIZE", "64M", 1);
    EXPECT_EQ(vulkan::byte_size_from_env("KILN_TEST_SIZE"), 64 * kMiB);
    ::setenv("KILN_TEST_SIZE", "3G", 1);
    EXPECT_EQ(vulkan::byte_size_from_env("KILN_TEST_SIZE"), 3 * 1024 * kMiB);
    ::setenv("KILN_TEST_SIZE", "4096", 1);
    EXPECT_EQ(vulkan::byte_size_from_env("KILN_TEST_SIZE"), 4096);
    for (const char* bad : {"64MB", "-1", "M", "1.5G", "99999999999999G"}) {
        ::setenv("KILN_TEST_SIZE", bad, 1);
        try {
            (void)vulkan::byte_size_from_env("KILN_TEST_SIZE");
            ADD_FAILURE() << bad << " was accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << bad;
            EXPECT_NE(std::string(e.what()).find("KILN_TEST_SIZE"), std::string::npos) << e.what();
        }
    }
    ::unsetenv("KILN_TEST_SIZE");
    EXPECT_EQ(vulkan::byte_size_from_env("KILN_TEST_SIZE"), 0);
}

// The VAE decode of a 128x128 image on the fixture VAE (channels 8, 16, 32, 32) needs a 1 MiB tensor whole (the
// upsampler's output before the last level). Under a 512 KiB limit `auto` decodes in bands at once, every tensor
// (the mid block's attention scores included) within the limit, and gives the CPU's untiled decode within the
// tiled decode's bound on GPUs (model_conformance_test.cpp, TiledVaeDecodeMatchesTheCpu: 1.5 times the float32
// module bound, one more rounding per GroupNorm). `off` is the OutOfMemory error naming the limit.
TEST(VulkanAllocationLimits, VaeDecodeRunsInBandsWithinTheLimit) {
    KILN_VULKAN_OR_SKIP(gpu);
    auto& vk = static_cast<vulkan::VulkanBackend&>(*gpu);
    LoadOptions on_cpu, on_gpu;
    on_gpu.device = vk.device();
    on_gpu.precision = DType::F32;
    const std::string path = test::data_path("sd15-mini/diffusers");
    const StableDiffusionModel cpu = load_model(path, on_cpu), dev = load_model(path, on_gpu);
    Tensor latents({1, 4, 16, 16});
    uint32_t s = 12345;
    for (int64_t i = 0; i < latents.numel(); ++i) latents[i] = float((s = s * 1664525u + 1013904223u) >> 8) / float(1 << 23) - 1.0f;
    const Tensor want = cpu.vae->decode(latents);
    const int64_t largest = largest_vae_decode_tensor_bytes(dev, 128, 128, 1);
    ASSERT_EQ(largest, 1 * kMiB) << "the fixture VAE changed: choose a new size and limit";
    ForcedLimits forced(vk, kMiB / 2, 0);
    std::string notice;
    const Tensor got = decode_latents(dev, latents, VaeTiling::Auto, [&](const std::string& line) { notice += line; });
    EXPECT_NE(notice.find("bands"), std::string::npos) << notice;
    EXPECT_NE(notice.find("more than one allocation may be"), std::string::npos) << notice;
    const double bound = 1.5 * 2e-5;
    const double err = test::relative_error(got, want), l2 = test::relative_l2_error(got, want);
    std::printf("[ vulkan limits ] VAE decode 128x128 in bands under a 512 KiB allocation limit: %.2e (L2 %.2e), bound %.1e\n",
                err, l2, bound);
    EXPECT_LT(err, bound);
    EXPECT_LT(l2, bound);
    expect_out_of_memory_naming([&] { (void)decode_latents(dev, latents, VaeTiling::Off, nullptr); },
                                "KILN_VULKAN_MAX_ALLOCATION");
}
#endif
