// The products' measured choices kept on disk (backends/vulkan/product_choices.h): the file round trip, files that
// are not this build's or are damaged (ignored, never an error), and that a first measured call records its choice.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "core/backend.h"
#include "gpu/linked_backends.h"
#include "ops/ops.h"
#if KILN_HAS_VULKAN
#include "backends/vulkan/product_choices.h"
#include "backends/vulkan/vulkan_backend.h"
#include "backends/vulkan/vulkan_kernels.h"
#endif

using namespace kiln;

#if KILN_HAS_VULKAN
namespace {

std::filesystem::path fresh_dir(const std::string& name) {
    const auto dir = std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    return dir;
}

std::string read(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace

TEST(ProductChoices, WrittenAndReadBack) {
    const auto dir = fresh_dir("kiln-choices");
    const std::string file = (dir / "sub" / "choices.txt").string();
    {
        vulkan::ProductChoices c(file);
        EXPECT_FALSE(c.find("matmul_f32 64 64 64 1 fma"));
        c.record("matmul_f32 64 64 64 1 fma", "small");
        c.record("conv2d_f16 320 8192 2880 2 matrix_sg32", "matrix_wide");
        c.save();  // the folder is made
    }
    ASSERT_TRUE(std::filesystem::exists(file));
    const std::string text = read(file);
    EXPECT_EQ(text.rfind(vulkan::ProductChoices::header() + "\n", 0), 0u) << text;
    vulkan::ProductChoices again(file);
    EXPECT_EQ(again.find("matmul_f32 64 64 64 1 fma").value_or(""), "small");
    EXPECT_EQ(again.find("conv2d_f16 320 8192 2880 2 matrix_sg32").value_or(""), "matrix_wide");
    EXPECT_FALSE(again.find("matmul_f32 64 64 64 2 fma"));
    // What was read is not written again unless something changed; a change is.
    std::filesystem::remove(file);
    again.save();
    EXPECT_FALSE(std::filesystem::exists(file));
    again.record("matmul_f32 64 64 64 1 fma", "large");
    again.save();
    EXPECT_EQ(vulkan::ProductChoices(file).find("matmul_f32 64 64 64 1 fma").value_or(""), "large");
    // clear() forgets for this process only.
    again.clear();
    EXPECT_FALSE(again.find("matmul_f32 64 64 64 1 fma"));
    EXPECT_TRUE(vulkan::ProductChoices(file).find("matmul_f32 64 64 64 1 fma"));
    // No file named: nothing kept, nothing written.
    vulkan::ProductChoices none("");
    none.record("k 1 1 1 1 fma", "large");
    none.save();
    EXPECT_EQ(none.find("k 1 1 1 1 fma").value_or(""), "large");
    std::filesystem::remove_all(dir);
}

// Another kiln build's file (its header names other kernels), a damaged one, or random bytes: all ignored whole.
TEST(ProductChoices, ForeignOrDamagedFilesAreIgnored) {
    const std::string h = vulkan::ProductChoices::header();
    EXPECT_EQ(vulkan::ProductChoices::parse(h + "\nmatmul_f32 1 2 3 4 fma large\n").size(), 1u);
    EXPECT_TRUE(vulkan::ProductChoices::parse("").empty());
    EXPECT_TRUE(vulkan::ProductChoices::parse("kiln-vulkan-product-choices 1 0000000000000000\nk 1 1 1 1 fma large\n").empty());
    EXPECT_TRUE(vulkan::ProductChoices::parse(h + "\nmatmul_f32 1 2 3 4 fma large\nno-space-here\n").empty());
    EXPECT_TRUE(vulkan::ProductChoices::parse(h + "\nk 1 1 1 1 fma la\x01rge\n").empty());
    EXPECT_TRUE(vulkan::ProductChoices::parse(h + "\n large\n").empty());
    // Fuzz: random lines after the header, and random bytes, never crash; a parse is either empty or every key and
    // build is printable text.
    std::mt19937 rng(7);
    for (int i = 0; i < 2000; ++i) {
        std::string text = i % 2 ? h + "\n" : "";
        const int n = int(rng() % 200);
        for (int j = 0; j < n; ++j) text += char(i % 3 ? " \nabc019_"[rng() % 8] : char(rng() % 256));
        for (const auto& [key, build] : vulkan::ProductChoices::parse(text)) {
            EXPECT_FALSE(key.empty());
            EXPECT_FALSE(build.empty());
            for (char c : key + build) EXPECT_TRUE(c >= ' ' && c <= '~');
        }
    }
    // A damaged file on disk: found nothing, and recording over it writes a good one.
    const auto dir = fresh_dir("kiln-choices-damaged");
    std::filesystem::create_directories(dir);
    const std::string file = (dir / "choices.txt").string();
    std::ofstream(file, std::ios::binary) << h << "\ngarbage\x01\n";
    vulkan::ProductChoices c(file);
    EXPECT_FALSE(c.find("garbage"));
    c.record("k 1 1 1 1 fma", "small");
    c.save();
    EXPECT_EQ(vulkan::ProductChoices(file).find("k 1 1 1 1 fma").value_or(""), "small");
    std::filesystem::remove_all(dir);
}

// In measured mode the first call of a shape times the builds and records the one it took, under the shape's key
// (kernel, m, n, k, batch, the matrix variant or "fma"); a later process reads it instead of timing again.
TEST(ProductChoices, AMeasuredCallRecordsItsChoice) {
    test::register_linked_backends();
    vulkan::VulkanBackend* vk = nullptr;
    for (const DeviceDescription& d : list_devices())
        if (d.device.kind == DeviceKind::Vulkan) vk = static_cast<vulkan::VulkanBackend*>(&backend_for(d.device));
    if (!vk) GTEST_SKIP() << "no Vulkan device";
    using P = vulkan::VulkanBackend::Products;
    const P was = vk->products();
    vk->set_products(P::Measured);
    vulkan::ProductChoices& kept = vk->kernels().product_choices();
    kept.clear();
    // A shape of its own (17 x 13 -> 11, batch 1), so that no earlier call chose its build.
    const Tensor x = Tensor::filled({1, 17, 13}, 0.5f).to_device(*vk, DType::F32);
    const Tensor w = Tensor::filled({11, 13}, 0.25f).to_device(*vk, DType::F32);
    const Tensor y = ops::linear(x, w, nullptr).to_host();
    EXPECT_FLOAT_EQ(y[0], 13 * 0.125f);
    const auto choice = kept.find("matmul_f32 17 11 13 1 fma");
    ASSERT_TRUE(choice) << "no choice recorded under the expected key";
    // One of the FMA builds timed for it (float32: no matrix units).
    EXPECT_TRUE(*choice == "large" || *choice == "small" || *choice == "rows64" || *choice == "cols64") << *choice;
    vk->set_products(was);
}
#endif
