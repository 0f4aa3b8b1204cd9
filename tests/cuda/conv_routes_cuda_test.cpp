// Each convolution route of the CUDA backend (im2col + cuBLASLt, cuDNN on NCHW, cuDNN's graph API on
// channels-last copies, the direct kernel for 1 to 4 output channels), forced one at a time through
// KILN_CUDA_CONV on a backend of its own, against the host's float32 convolution: plain and with
// GroupNorm+SiLU fused, bias included, on shapes that break tiles
// (odd sides, 1x1, strided, 3 and 4 channels, more than one image) and one at SD's widths. The bound is
// tests/gpu/device_ops_test.cpp's (the same compositions: a product rounded to the storage type, then the
// bias; the normalised input rounded once more). A route that has no kernel for a shape falls back to
// im2col, so the test also checks that the forced cuDNN routes ran where they have kernels (F16 at least).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_device_ops.h"
#include "common/op_bounds.h"
#include "cuda/kernel_test_support.h"
#include "ops/ops.h"

namespace kiln::cuda::test {
namespace {

using kiln::test::abs_of;
using kiln::test::expect_close;
using kiln::test::random_in;

struct ConvCase {
    int n, cin, h, w, cout, k, stride, pad, groups;
    std::string name() const {
        return std::to_string(n) + "x" + std::to_string(cin) + "x" + std::to_string(h) + "x" + std::to_string(w) +
               "->" + std::to_string(cout) + " k" + std::to_string(k) + " s" + std::to_string(stride);
    }
};

// A backend of its own with KILN_CUDA_CONV set to `route` while it is made (the setting is read then).
std::unique_ptr<CudaBackend> backend_with_route(const char* route) {
    setenv("KILN_CUDA_CONV", route, 1);
    auto b = std::make_unique<CudaBackend>(0);
    unsetenv("KILN_CUDA_CONV");
    return b;
}

TEST(ConvRoutesCuda, EveryRouteAgreesWithTheHost) {
    KILN_SKIP_WITHOUT_GPU();
    const ConvCase cases[] = {{1, 4, 7, 5, 3, 3, 1, 1, 2},    {2, 8, 9, 9, 8, 3, 2, 1, 4},
                              {1, 6, 5, 6, 10, 1, 1, 0, 3},   {3, 40, 6, 7, 24, 1, 1, 0, 4},  // 1x1: batched
                              {2, 32, 16, 16, 16, 3, 1, 1, 32},
                              {2, 64, 17, 13, 40, 3, 1, 1, 32}, {1, 320, 16, 16, 320, 3, 1, 1, 32},
                              // few outputs: the VAE's last convolution at odd sides over several tiles, padding 2
                              {2, 128, 19, 37, 3, 3, 1, 1, 32}, {1, 9, 17, 40, 4, 3, 1, 2, 3}};
    for (const char* route : {"im2col", "cudnn", "nhwc", "few"}) {
        std::unique_ptr<CudaBackend> gpu = backend_with_route(route);
        const auto& ops = static_cast<const CudaDeviceOps&>(gpu->ops());
        for (DType t : kStorageTypes)
            for (const ConvCase& c : cases) {
                if (!gpu->supports(t)) continue;  // BF16 below compute capability 8.0 (KILN_CUDA_ARCH=75 too)
                Tensor x = random_in({c.n, c.cin, c.h, c.w}, 4, t), w = random_in({c.cout, c.cin, c.k, c.k}, 5, t);
                Tensor b = random_in({c.cout}, 6, t), gamma = random_in({c.cin}, 7, t, 0.5f, 1.5f);
                Tensor beta = random_in({c.cin}, 8, t);
                const std::string name = std::string(route) + " conv " + c.name();
                const double k = double(c.cin) * c.k * c.k;
                Tensor babs = abs_of(b);
                Tensor xd = x.to_device(*gpu, t), wd = w.to_device(*gpu, t), bd = b.to_device(*gpu, t);
                {
                    Tensor ref = kiln::ops::conv2d(x, w, &b, c.stride, c.pad);
                    Tensor scale = kiln::ops::conv2d(abs_of(x), abs_of(w), &babs, c.stride, c.pad);
                    expect_close(ops.conv2d(xd, wd, &bd, c.stride, c.pad).to_host(), ref, scale, k, t, 1, name);
                }
                {
                    Tensor ref = kiln::ops::conv2d_group_norm_silu(x, c.groups, gamma, beta, 1e-5f, w, &b, c.stride,
                                                                  c.pad);
                    Tensor normed = kiln::ops::group_norm(x, c.groups, gamma, beta, 1e-5f);
                    kiln::ops::silu_(normed);
                    Tensor scale = kiln::ops::conv2d(abs_of(normed), abs_of(w), &babs, c.stride, c.pad);
                    const double kk = k + double(c.h) * c.w * c.cin / c.groups;
                    expect_close(ops.conv2d_group_norm_silu(xd, c.groups, gamma.to_device(*gpu, t),
                                                            beta.to_device(*gpu, t), 1e-5f, wd, &bd, c.stride, c.pad)
                                     .to_host(),
                                 ref, scale, kk, t, 3, name + " +groupnorm+silu");
                }
            }
        // The fusions the VAE uses: y += conv(GroupNorm+SiLU(x)), and the convolution of x upsampled 2x; and the
        // UNet's: conv(GroupNorm+SiLU(x)) plus a bias per image and channel. Each shape's first call composes the
        // ops (and chooses the route); the second runs fused on the NHWC route. 64 channels of 8x8 (64 pixels):
        // whole 64 x 64 tiles, the transposes' 16-bit fast path both ways.
        for (DType t : kStorageTypes)
            for (const ConvCase& c : {ConvCase{1, 32, 9, 7, 32, 3, 1, 1, 8}, ConvCase{2, 64, 8, 8, 40, 3, 1, 1, 32},
                                      ConvCase{2, 64, 8, 8, 64, 3, 1, 1, 32}}) {
                if (!gpu->supports(t)) continue;
                Tensor x = random_in({c.n, c.cin, c.h, c.w}, 31, t), w = random_in({c.cout, c.cin, 3, 3}, 32, t);
                Tensor b = random_in({c.cout}, 33, t), gamma = random_in({c.cin}, 34, t, 0.5f, 1.5f);
                Tensor beta = random_in({c.cin}, 35, t);
                Tensor acc = random_in({c.n, c.cout, c.h, c.w}, 36, t, -2.0f, 2.0f);
                const double k = double(c.cin) * 9;
                Tensor babs = abs_of(b);
                Tensor xd = x.to_device(*gpu, t), wd = w.to_device(*gpu, t), bd = b.to_device(*gpu, t);
                Tensor gd = gamma.to_device(*gpu, t), betad = beta.to_device(*gpu, t);
                Tensor ref = acc;
                kiln::ops::add_(ref, kiln::ops::conv2d_group_norm_silu(x, c.groups, gamma, beta, 1e-5f, w, &b, 1, 1));
                Tensor normed = kiln::ops::group_norm(x, c.groups, gamma, beta, 1e-5f);
                kiln::ops::silu_(normed);
                Tensor scale = abs_of(acc);
                kiln::ops::add_(scale, kiln::ops::conv2d(abs_of(normed), abs_of(w), &babs, 1, 1));
                Tensor up = kiln::ops::upsample_nearest2x(x);
                Tensor up_ref = kiln::ops::conv2d(up, w, &b, 1, 1);
                Tensor up_scale = kiln::ops::conv2d(abs_of(up), abs_of(w), &babs, 1, 1);
                // The UNet's form: this convolution's image bias at column 3 of a wider one (every block's time
                // projection from one product).
                Tensor wide_bias = random_in({c.n, c.cout + 5}, 37, t), ibd = wide_bias.to_device(*gpu, t);
                Tensor image_bias = kiln::ops::columns(wide_bias, 3, c.cout);
                Tensor plus_ref = kiln::ops::conv2d_group_norm_silu(x, c.groups, gamma, beta, 1e-5f, w, &b, 1, 1);
                kiln::ops::add_channel_bias_(plus_ref, image_bias);
                Tensor plus_scale = kiln::ops::conv2d(abs_of(normed), abs_of(w), &babs, 1, 1);
                kiln::ops::add_channel_bias_(plus_scale, abs_of(image_bias));
                Tensor y_bias = random_in({c.cout}, 38, t), ybd = y_bias.to_device(*gpu, t);
                std::vector<float> yb_rows;  // y_bias for each image, as add_channel_bias_ takes it
                for (int64_t i = 0; i < c.n; ++i)
                    yb_rows.insert(yb_rows.end(), y_bias.values().begin(), y_bias.values().end());
                Tensor yb_rows_d = Tensor({c.n, c.cout}, yb_rows).to_device(*gpu, t);
                for (int call = 1; call <= 2; ++call) {
                    const std::string name = std::string(route) + " call " + std::to_string(call) + " " + c.name();
                    Tensor accd = acc.to_device(*gpu, t);
                    ops.conv2d_group_norm_silu_add_(accd, xd, c.groups, gd, betad, 1e-5f, wd, &bd, 1, 1, nullptr);
                    // With a bias for y first (the UNet's shortcut): the bits of adding it, then the rest.
                    Tensor shifted = acc.to_device(*gpu, t), composed_shift = acc.to_device(*gpu, t);
                    ops.conv2d_group_norm_silu_add_(shifted, xd, c.groups, gd, betad, 1e-5f, wd, &bd, 1, 1, &ybd);
                    ops.add_channel_bias_(composed_shift, yb_rows_d);
                    ops.conv2d_group_norm_silu_add_(composed_shift, xd, c.groups, gd, betad, 1e-5f, wd, &bd, 1, 1,
                                                    nullptr);
                    EXPECT_EQ(shifted.to_host().values(), composed_shift.to_host().values())
                        << name << " conv2d_group_norm_silu_add_ with y_bias";
                    // The GroupNorm conv's bound (above) plus the sum's own rounding (as add_).
                    expect_close(accd.to_host(), ref, scale, k + double(c.h) * c.w * c.cin / c.groups, t, 4,
                                 name + " conv2d_group_norm_silu_add_");
                    expect_close(ops.conv2d_upsample2x(xd, wd, &bd, 1, 1).to_host(), up_ref, up_scale, k, t, 1,
                                 name + " conv2d_upsample2x");
                    // The same bits as its composition on the device, and its rounding once more in the bound.
                    Tensor plus =
                        ops.conv2d_group_norm_silu_plus(xd, c.groups, gd, betad, 1e-5f, wd, &bd, ibd, 3, 1, 1);
                    Tensor composed = ops.conv2d_group_norm_silu(xd, c.groups, gd, betad, 1e-5f, wd, &bd, 1, 1);
                    ops.add_channel_bias_(composed, ops.columns(ibd, 3, c.cout));
                    EXPECT_EQ(plus.to_host().values(), composed.to_host().values())
                        << name << " conv2d_group_norm_silu_plus";
                    expect_close(plus.to_host(), plus_ref, plus_scale, k + double(c.h) * c.w * c.cin / c.groups, t, 4,
                                 name + " conv2d_group_norm_silu_plus");
                }
            }
        using Route = CudaDeviceOps::ConvRoute;
        const std::string r = route;
        const Route forced = r == "im2col" ? Route::Im2col
                             : r == "cudnn" ? Route::Cudnn
                             : r == "nhwc"  ? Route::CudnnNhwc
                                            : Route::FewOutputs;
        std::printf("[ routes   ] KILN_CUDA_CONV=%s: %lld of %lld convolutions on it\n", route,
                    static_cast<long long>(ops.convolutions_on(forced)),
                    static_cast<long long>(ops.convolutions_on(Route::Im2col) + ops.convolutions_on(Route::Cudnn) +
                                           ops.convolutions_on(Route::CudnnNhwc) +
                                           ops.convolutions_on(Route::FewOutputs)));
        EXPECT_GT(ops.convolutions_on(forced), 0) << route;
        if (forced != CudaDeviceOps::ConvRoute::Cudnn) {
            EXPECT_EQ(ops.convolutions_on(CudaDeviceOps::ConvRoute::Cudnn), 0) << route;
        }
        if (forced != CudaDeviceOps::ConvRoute::CudnnNhwc) {
            EXPECT_EQ(ops.convolutions_on(CudaDeviceOps::ConvRoute::CudnnNhwc), 0) << route;
        }
        if (forced != Route::FewOutputs) {
            EXPECT_EQ(ops.convolutions_on(Route::FewOutputs), 0) << route;
        }
    }
}

// The NHWC route keeps a filter channels-last in its own storage after its first use (CudaBackend::
// channels_last). The tensor must still read as [cout, cin, k, k]: to_host, a copy and a conversion of it;
// freeing it forgets the mark. And on measured routes the same weight must convolve right at every size,
// whichever route each size takes (at a tiny one im2col or cuDNN's NCHW kernels usually win, and read the
// filter rearranged back).
TEST(ConvRoutesCuda, AFilterKeptChannelsLastStillReadsInPyTorchsLayout) {
    KILN_SKIP_WITHOUT_GPU();
    const DType t = DType::F16;
    Tensor w = random_in({24, 16, 3, 3}, 41, t), b = random_in({24}, 42, t);
    Tensor babs = abs_of(b);
    auto check_conv = [&](const CudaDeviceOps& ops, CudaBackend& gpu, const Tensor& wd, const Tensor& bd, int side,
                          const std::string& what) {
        Tensor x = random_in({2, 16, side, side}, 43 + side, t);
        Tensor ref = kiln::ops::conv2d(x, w, &b, 1, 1);
        Tensor scale = kiln::ops::conv2d(abs_of(x), abs_of(w), &babs, 1, 1);
        expect_close(ops.conv2d(x.to_device(gpu, t), wd, &bd, 1, 1).to_host(), ref, scale, 16.0 * 9, t, 1,
                     what + ", side " + std::to_string(side));
    };
    {
        std::unique_ptr<CudaBackend> gpu = backend_with_route("nhwc");
        if (!gpu->cudnn_nhwc()) GTEST_SKIP() << "built without cuDNN: no NHWC route";
        const auto& ops = static_cast<const CudaDeviceOps&>(gpu->ops());
        Tensor wd = w.to_device(*gpu, t), bd = b.to_device(*gpu, t);
        const std::vector<float> w_host = w.to_device(*gpu, t).to_host().values();  // F16, never rearranged
        check_conv(ops, *gpu, wd, bd, 64, "NHWC route");
        const auto* f = gpu->channels_last(wd.device_data());
        ASSERT_NE(f, nullptr) << "the NHWC route did not keep the filter channels-last";
        EXPECT_EQ(f->cout, 24);
        EXPECT_EQ(wd.to_host().values(), w_host);
        const Tensor copy = wd;
        EXPECT_NE(gpu->channels_last(copy.device_data()), nullptr);
        EXPECT_EQ(copy.to_host().values(), w_host);
        EXPECT_EQ(wd.to_device(*gpu, DType::F32).to_host().values(), w_host);
        const void* storage = wd.device_data();
        wd = Tensor();  // freed: the storage's next owner is not taken for a filter
        EXPECT_EQ(gpu->channels_last(storage), nullptr);
    }
    auto gpu = std::make_unique<CudaBackend>(0);
    const auto& ops = static_cast<const CudaDeviceOps&>(gpu->ops());
    Tensor wd = w.to_device(*gpu, t), bd = b.to_device(*gpu, t);
    for (int side : {64, 3, 64}) check_conv(ops, *gpu, wd, bd, side, "measured routes");
}

// Under a --vram cap the im2col route's column buffer is a share of the cap (cuda_device_ops.cpp,
// scratch_budget): here the whole column matrix (16 x 9 rows of 512 x 512 pixels, 72 MiB in fp16) would exceed a
// 64 MiB cap by itself, so the convolution runs only if it is tiled within it; the values are still the host's.
TEST(ConvRoutesCuda, Im2colColumnsStayWithinTheCap) {
    KILN_SKIP_WITHOUT_GPU();
    std::unique_ptr<CudaBackend> gpu = backend_with_route("im2col");
    ASSERT_TRUE(gpu->set_memory_limit(int64_t(64) << 20));
    const DType t = DType::F16;
    Tensor x = random_in({1, 16, 512, 512}, 4, t), w = random_in({8, 16, 3, 3}, 5, t), b = random_in({8}, 6, t);
    Tensor babs = abs_of(b);
    Tensor ref = kiln::ops::conv2d(x, w, &b, 1, 1);
    Tensor scale = kiln::ops::conv2d(abs_of(x), abs_of(w), &babs, 1, 1);
    Tensor xd = x.to_device(*gpu, t), wd = w.to_device(*gpu, t), bd = b.to_device(*gpu, t);
    expect_close(gpu->ops().conv2d(xd, wd, &bd, 1, 1).to_host(), ref, scale, 16.0 * 9, t, 1, "im2col under 64 MiB");
}

TEST(ConvRoutesCuda, AnUnknownRouteIsAnErrorNamingTheSetting) {
    KILN_SKIP_WITHOUT_GPU();
    setenv("KILN_CUDA_CONV", "winograd", 1);
    try {
        CudaBackend gpu(0);
        ADD_FAILURE() << "KILN_CUDA_CONV=winograd was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
        EXPECT_NE(std::string(e.what()).find("KILN_CUDA_CONV"), std::string::npos) << e.what();
    }
    unsetenv("KILN_CUDA_CONV");
}

}  // namespace
}  // namespace kiln::cuda::test
