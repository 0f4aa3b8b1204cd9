// The Vulkan backend's fused products (issue 23): linear_add_, conv2d_group_norm_silu_add_ / _plus and
// conv2d_upsample2x are epilogues (store_c) and index arithmetic (load_b) of matmul.comp and conv2d.comp, shared
// by every build. device_ops_test.cpp runs them in the device's own build (lavapipe: the direct one); here each
// runs in every FMA build (direct, 128x128 and 64x64 tiles) and, on a device with matrix units, the matrix-unit
// build, with and without split-K, whose second pass is the one that adds into the output, against the host's composition under device_ops_test.cpp's bounds. Also the
// first call of a shape in Measured mode, which times the builds by running the product several times: an op
// that adds into its output must still add once. Skips without a Vulkan device.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "common/op_bounds.h"
#include "core/backend.h"
#include "gpu/linked_backends.h"
#include "kiln/error.h"
#include "ops/ops.h"
#if KILN_HAS_VULKAN
#include "backends/vulkan/physical_devices.h"
#include "backends/vulkan/vulkan_backend.h"
#include "backends/vulkan/vulkan_device_ops.h"
#include "backends/vulkan/vulkan_kernels.h"
#endif

using namespace kiln;

#if KILN_HAS_VULKAN
namespace {

vulkan::VulkanBackend* first_vulkan() {
    test::register_linked_backends();
    for (const DeviceDescription& d : list_devices())
        if (d.device.kind == DeviceKind::Vulkan) return static_cast<vulkan::VulkanBackend*>(&backend_for(d.device));
    return nullptr;
}

using P = vulkan::VulkanBackend::Products;

// Runs check(build, slices) for each build and 1 or 3 slices of k, restoring the backend's settings.
void for_each_build(vulkan::VulkanBackend& vk, const std::vector<P>& builds, const std::function<void(P, int)>& check) {
    const P was = vk.products();
    const int was_split = vk.split_k();
    for (P build : builds)
        for (int slices : {1, 3}) {
            vk.set_products(build);
            vk.set_split_k(slices);
            check(build, slices);
        }
    vk.set_products(was);
    vk.set_split_k(was_split);
}

std::string tag(P build, int slices, DType t) {
    const char* names[] = {"measured", "128x128", "64x64", "direct", "matrix", "64x128", "128x64"};
    return std::string(" (") + names[int(build)] + ", " + std::to_string(slices) + " slices, " + dtype_name(t) + ")";
}

}  // namespace

// Bounds as in device_ops_test.cpp: the composition's roundings (factor), K-term float32 sums on each side.
// The FMA builds in float32 only: they differ in which threads call store_c / load_b, not in the storage type's
// code, which device_ops_test.cpp runs in float16 (and float32 keeps to the pipelines the other product tests
// compile: lavapipe compiles each on first use, seconds for a tiled one). The matrix-unit build (float16 only)
// where the device has it (not lavapipe): its float32 additions may truncate (2^-23, not 2^-24), so its sums'
// length is taken 1.5 times: (1.5 K + 1 + 2) 2u = (K + 2) 3u.
TEST(VulkanFusedOps, EveryBuildAndSplitK) {
    vulkan::VulkanBackend* vk = first_vulkan();
    if (!vk) GTEST_SKIP() << "no Vulkan device";
    for (DType t : {DType::F32, DType::F16}) {
        const bool matrix = t == DType::F16;
        if (!vk->supports(t) || (matrix && !vk->physical().matrix_products)) continue;
        const std::vector<P> builds = matrix ? std::vector<P>{P::Matrix} : std::vector<P>{P::Direct, P::Large, P::Small, P::Rows64, P::Cols64};
        const auto sums = [matrix](double k) { return matrix ? 1.5 * k + 1 : k; };
        const auto random = [t](Shape s, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
            return test::random_in(std::move(s), seed, t, lo, hi);
        };
        // linear_add_: k = 150 (split into slices of 64, 64 and 22), 33 rows, 31 outputs.
        const Tensor x = random({1, 33, 150}, 1), w = random({31, 150}, 2), b = random({31}, 3);
        const Tensor acc = random({1, 33, 31}, 4, -4.0f, 4.0f), babs = test::abs_of(b);
        Tensor lin_ref = ops::linear(x, w, &b), lin_scale = ops::linear(test::abs_of(x), test::abs_of(w), &babs);
        ops::add_(lin_ref, acc);
        ops::add_(lin_scale, test::abs_of(acc));
        const Tensor xd = x.to_device(*vk, t), wdv = w.to_device(*vk, t), bd = b.to_device(*vk, t);
        for_each_build(*vk, builds, [&](P build, int slices) {
            Tensor accd = acc.to_device(*vk, t);
            ops::linear_add_(accd, xd, wdv, &bd);
            test::expect_close(accd.to_host(), lin_ref, lin_scale, sums(150), t, 1, "linear_add_" + tag(build, slices, t));
        });
        // The convolutions: 16 channels in 4 groups, 3x3 (k = 144), 33 outputs; the upsampled one with stride 2.
        // Three image sizes: 5x7, where no output row holds 8 pixels; 6x16, where the plain convolutions' (16 wide)
        // do; 3x17, where the upsampled one's (16 wide) does: the tiles then read input pixels 4 or 8 at a
        // time (conv2d.comp, row_read). The last two again with 131 outputs (two tiles of 128, three of 64): the
        // tiled builds then read the input from columns written first (VulkanDeviceOps::conv_from_columns), here in
        // chunks of 128 pixels (the 6x16 images' 192 in two, the last partial).
        const int n = 2, cin = 16, groups = 4;
        const int64_t was_chunk = vk->columns_chunk_bytes();
        vk->set_columns_chunk_bytes(144 * int64_t(dtype_size(t)) * 128);
        for (const auto& [h, wd, cout] : {std::tuple{5, 7, 33}, std::tuple{6, 16, 33}, std::tuple{3, 17, 33},
                                          std::tuple{6, 16, 131}, std::tuple{3, 17, 131}}) {
            const std::string size = " " + std::to_string(h) + "x" + std::to_string(wd) + " -> " + std::to_string(cout);
            const Tensor img = random({n, cin, h, wd}, 5), filt = random({cout, cin, 3, 3}, 6), fb = random({cout}, 7);
            const Tensor gamma = random({cin}, 8, 0.5f, 1.5f), beta = random({cin}, 9), yb = random({cout}, 10);
            const Tensor image_bias = random({n, cout + 3}, 11), fbabs = test::abs_of(fb);
            const Tensor y0 = random({n, cout, h, wd}, 12, -2.0f, 2.0f);
            Tensor add_ref = y0;
            ops::conv2d_group_norm_silu_add_(add_ref, img, groups, gamma, beta, 1e-5f, filt, &fb, 1, 1, &yb);
            const Tensor plus_ref = ops::conv2d_group_norm_silu_plus(img, groups, gamma, beta, 1e-5f, filt, &fb, image_bias,
                                                                     2, 1, 1);
            Tensor normed = ops::group_norm(img, groups, gamma, beta, 1e-5f);
            ops::silu_(normed);
            Tensor conv_scale = ops::conv2d(test::abs_of(normed), test::abs_of(filt), &fbabs, 1, 1);
            Tensor plus_scale = conv_scale, add_scale = conv_scale;
            ops::add_channel_bias_(plus_scale, ops::columns(test::abs_of(image_bias), 2, cout));
            ops::add_(add_scale, test::abs_of(y0));
            ops::add_channel_bias_(add_scale, Tensor({n, cout}, [&] {
                                       std::vector<float> v;
                                       for (int i = 0; i < n; ++i)
                                           for (float e : yb.values()) v.push_back(std::fabs(e));
                                       return v;
                                   }()));
            const Tensor up = ops::upsample_nearest2x(img);
            const Tensor up_ref = ops::conv2d(up, filt, &fb, 2, 0);
            const Tensor up_scale = ops::conv2d(test::abs_of(up), test::abs_of(filt), &fbabs, 2, 0);
            const double kn = 144.0 + double(h) * wd * cin / groups;

            const Tensor imgd = img.to_device(*vk, t), filtd = filt.to_device(*vk, t), fbd = fb.to_device(*vk, t);
            const Tensor gd = gamma.to_device(*vk, t), betad = beta.to_device(*vk, t), ybd = yb.to_device(*vk, t);
            const Tensor ibd = image_bias.to_device(*vk, t);
            for_each_build(*vk, builds, [&](P build, int slices) {
                const std::string what = tag(build, slices, t) + size;
                Tensor yd = y0.to_device(*vk, t);
                ops::conv2d_group_norm_silu_add_(yd, imgd, groups, gd, betad, 1e-5f, filtd, &fbd, 1, 1, &ybd);
                test::expect_close(yd.to_host(), add_ref, add_scale, sums(kn), t, 5, "conv2d_group_norm_silu_add_" + what);
                test::expect_close(
                    ops::conv2d_group_norm_silu_plus(imgd, groups, gd, betad, 1e-5f, filtd, &fbd, ibd, 2, 1, 1).to_host(),
                    plus_ref, plus_scale, sums(kn), t, 4, "conv2d_group_norm_silu_plus" + what);
                test::expect_close(ops::conv2d_upsample2x(imgd, filtd, &fbd, 2, 0).to_host(), up_ref, up_scale, sums(144), t, 1,
                                   "conv2d_upsample2x" + what);
            });
        }
        vk->set_columns_chunk_bytes(was_chunk);
    }
}

// Measured mode's first call of a shape runs each build twice to time it. The ops that add into their output
// time a scratch copy instead: adding at each timing run (4 or more) would be off by 3 |linear| or 3 |conv| at least,
// far above the bound.
TEST(VulkanFusedOps, MeasuringAddsOnce) {
    vulkan::VulkanBackend* vk = first_vulkan();
    if (!vk) GTEST_SKIP() << "no Vulkan device";
    const P was = vk->products();
    vk->set_products(P::Measured);
    vk->kernels().product_choices().clear();  // nor an earlier process (choices kept on disk)
    const DType t = DType::F32;
    // Shapes of their own, so that no earlier call chose their build.
    const Tensor x = test::random_in({1, 19, 23}, 31, t), w = test::random_in({29, 23}, 32, t);
    const Tensor acc = test::random_in({1, 19, 29}, 33, t, -4.0f, 4.0f);
    Tensor ref = ops::linear(x, w, nullptr), scale = ops::linear(test::abs_of(x), test::abs_of(w), nullptr);
    ops::add_(ref, acc);
    ops::add_(scale, test::abs_of(acc));
    Tensor accd = acc.to_device(*vk, t);
    ops::linear_add_(accd, x.to_device(*vk, t), w.to_device(*vk, t), nullptr);
    test::expect_close(accd.to_host(), ref, scale, 23, t, 1, "linear_add_, first call measured");

    const Tensor img = test::random_in({1, 6, 5, 3}, 34, t), filt = test::random_in({7, 6, 3, 3}, 35, t);
    const Tensor gamma = test::random_in({6}, 36, t, 0.5f, 1.5f), beta = test::random_in({6}, 37, t);
    const Tensor y0 = test::random_in({1, 7, 5, 3}, 38, t, -2.0f, 2.0f);
    Tensor yref = y0;
    ops::conv2d_group_norm_silu_add_(yref, img, 2, gamma, beta, 1e-5f, filt, nullptr, 1, 1);
    Tensor normed = ops::group_norm(img, 2, gamma, beta, 1e-5f);
    ops::silu_(normed);
    Tensor yscale = ops::conv2d(test::abs_of(normed), test::abs_of(filt), nullptr, 1, 1);
    ops::add_(yscale, test::abs_of(y0));
    Tensor yd = y0.to_device(*vk, t);
    ops::conv2d_group_norm_silu_add_(yd, img.to_device(*vk, t), 2, gamma.to_device(*vk, t), beta.to_device(*vk, t),
                                     1e-5f, filt.to_device(*vk, t), nullptr, 1, 1);
    test::expect_close(yd.to_host(), yref, yscale, 54 + 45, t, 4, "conv2d_group_norm_silu_add_, first call measured");
    vk->set_products(was);
}

// KILN_VULKAN_FUSED: 1 or unset fuses, 0 composes (for comparisons), anything else names the setting.
TEST(VulkanFusedOps, SettingFromTheEnvironment) {
    EXPECT_TRUE(vulkan::fused_from_env(nullptr));
    EXPECT_TRUE(vulkan::fused_from_env("1"));
    EXPECT_FALSE(vulkan::fused_from_env("0"));
    for (const char* bad : {"yes", "2", " 0"}) {
        try {
            vulkan::fused_from_env(bad);
            ADD_FAILURE() << bad;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("KILN_VULKAN_FUSED"), std::string::npos) << e.what();
        }
    }
    // The tiled builds' convolutions through columns (conv_columns.comp): the same form.
    EXPECT_TRUE(vulkan::conv_columns_from_env(nullptr));
    EXPECT_FALSE(vulkan::conv_columns_from_env("0"));
    EXPECT_THROW(vulkan::conv_columns_from_env("on"), Error);
    // The convolutions' row reads (conv2d.comp, row_read): the same form.
    EXPECT_TRUE(vulkan::conv_rows_from_env(nullptr));
    EXPECT_TRUE(vulkan::conv_rows_from_env("1"));
    EXPECT_FALSE(vulkan::conv_rows_from_env("0"));
    for (const char* bad : {"no", "8", "0 "}) {
        try {
            vulkan::conv_rows_from_env(bad);
            ADD_FAILURE() << bad;
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
            EXPECT_NE(std::string(e.what()).find("KILN_VULKAN_CONV_ROWS8"), std::string::npos) << e.what();
        }
    }
}
#endif
