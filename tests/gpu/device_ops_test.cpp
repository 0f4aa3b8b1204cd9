// The ops of ops.h called on device tensors (each GPU backend's DeviceOps: on CUDA cuBLASLt products, cuDNN
// or im2col convolutions, the flash kernel or products for attention; on Vulkan the shaders) against the same
// ops on the host, for every storage dtype the backend has, on shapes that break tiles: 1-element batches,
// odd sizes, 1x1 and strided convolutions, head dims above the flash kernel's 256. Run once per GPU device
// (lavapipe's Vulkan in CI); none without one.
//
// Inputs are rounded to the dtype first, so both sides see the same numbers; the host computes in float32.
// Bound per output element, with u = 2^-24 (float32) and u_s the storage dtype's unit roundoff (2^-24, 2^-11,
// 2^-8 for F32, F16, BF16): the device rounds the result once to the storage dtype (u_s |ref|), and each side
// sums K products in float32 in its own order ((K + 2) u S each, S = the same sum over absolute values,
// computed by running the op on |inputs|). Compositions that store an intermediate in the storage dtype
// (the im2col columns are exact copies; the normalised input of a fused GroupNorm conv is rounded, as is the
// probability matrix of attention) add u_s times their own absolute sum: the bound below takes 2 u_s S + u_s |ref|
// for those. A wrong index or a missing bias is off by O(|ref|), far above.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <random>
#include <tuple>

#include "common/op_bounds.h"
#include "gpu_test_util.h"
#include "kiln/error.h"
#include "ops/call_recorder.h"
#include "ops/device_ops.h"
#include "ops/ops.h"

using namespace kiln;

using kiln::test::abs_of;
using kiln::test::expect_close;

namespace {

Tensor random(Shape shape, uint32_t seed, DType t, float lo = -1.0f, float hi = 1.0f) {
    return kiln::test::random_in(std::move(shape), seed, t, lo, hi);
}

}  // namespace

class DeviceOps : public kiln::test::GpuTest {};
KILN_GPU_TEST_SUITE(DeviceOps);

TEST_P(DeviceOps, Linear) {
    Backend* gpu = &this->gpu();
    for (DType t : kiln::test::gpu_dtypes(*gpu))
        for (auto [rows, in, out] : {std::tuple{1, 1, 1}, {3, 33, 31}, {77, 320, 640}, {2, 5, 1}}) {
            Tensor x = random({1, rows, in}, 1, t), w = random({out, in}, 2, t), b = random({out}, 3, t);
            Tensor ref = ops::linear(x, w, &b);
            Tensor bias_abs = abs_of(b);
            Tensor scale = ops::linear(abs_of(x), abs_of(w), &bias_abs);
            Tensor xd = x.to_device(*gpu, t), wd = w.to_device(*gpu, t), bd = b.to_device(*gpu, t);
            // The product is rounded to t, then the bias added and rounded again: u_s S more (factor 1).
            expect_close(ops::linear(xd, wd, &bd).to_host(), ref, scale, in, t, 1,
                         "linear " + std::to_string(rows) + "x" + std::to_string(in) + "->" + std::to_string(out));
        }
}

// acc += linear(x, w, b): CUDA and Vulkan add acc in the product's epilogue (one rounding: the bits may differ
// from the composition's by it), other backends compose linear and add_ (the product rounded, then the sum):
// the bound is linear's (the composition's), its sums including |acc|.
TEST_P(DeviceOps, LinearAddAccumulatesIntoTheResidual) {
    Backend* gpu = &this->gpu();
    for (DType t : kiln::test::gpu_dtypes(*gpu))
        for (auto [rows, in, out] : {std::tuple{1, 1, 1}, {3, 33, 31}, {77, 320, 640}, {2, 5, 1}}) {
            Tensor x = random({1, rows, in}, 21, t), w = random({out, in}, 22, t), b = random({out}, 23, t);
            Tensor acc = random({1, rows, out}, 24, t, -4.0f, 4.0f);
            Tensor ref = acc;
            ops::add_(ref, ops::linear(x, w, &b));
            Tensor bias_abs = abs_of(b);
            Tensor scale = abs_of(acc);
            ops::add_(scale, ops::linear(abs_of(x), abs_of(w), &bias_abs));
            Tensor accd = acc.to_device(*gpu, t), xd = x.to_device(*gpu, t), wd = w.to_device(*gpu, t),
                   bd = b.to_device(*gpu, t);
            ops::linear_add_(accd, xd, wd, &bd);
            expect_close(accd.to_host(), ref, scale, in, t, 1,
                         "linear_add_ " + std::to_string(rows) + "x" + std::to_string(in) + "->" + std::to_string(out));
            Tensor wrong = random({1, rows, out + 1}, 25, t).to_device(*gpu, t);
            EXPECT_THROW(ops::linear_add_(wrong, xd, wd, &bd), Error) << "an accumulator of another shape";
        }
}

TEST_P(DeviceOps, Conv2dAndFusedNorm) {
    Backend* gpu = &this->gpu();
    struct C {
        int n, cin, h, w, cout, k, stride, pad, groups;
    };
    for (DType t : kiln::test::gpu_dtypes(*gpu))
        for (C c : {C{1, 4, 7, 5, 3, 3, 1, 1, 2}, C{2, 8, 9, 9, 8, 3, 2, 1, 4}, C{1, 6, 5, 6, 10, 1, 1, 0, 3},
                    C{2, 32, 16, 16, 16, 3, 1, 1, 32}}) {
            Tensor x = random({c.n, c.cin, c.h, c.w}, 4, t), w = random({c.cout, c.cin, c.k, c.k}, 5, t);
            Tensor b = random({c.cout}, 6, t), gamma = random({c.cin}, 7, t, 0.5f, 1.5f), beta = random({c.cin}, 8, t);
            const std::string name = "conv " + std::to_string(c.cin) + "x" + std::to_string(c.h) + "x" +
                                     std::to_string(c.w) + " k" + std::to_string(c.k) + " s" + std::to_string(c.stride);
            const double k = double(c.cin) * c.k * c.k;
            Tensor babs = abs_of(b);
            Tensor xd = x.to_device(*gpu, t), wd = w.to_device(*gpu, t), bd = b.to_device(*gpu, t);
            {
                Tensor ref = ops::conv2d(x, w, &b, c.stride, c.pad);
                Tensor scale = ops::conv2d(abs_of(x), abs_of(w), &babs, c.stride, c.pad);
                // Rounded product, then the bias: as linear (factor 1).
                expect_close(ops::conv2d(xd, wd, &bd, c.stride, c.pad).to_host(), ref, scale, k, t, 1, name);
            }
            {
                Tensor ref = ops::conv2d_group_norm_silu(x, c.groups, gamma, beta, 1e-5f, w, &b, c.stride, c.pad);
                Tensor normed = ops::group_norm(x, c.groups, gamma, beta, 1e-5f);
                ops::silu_(normed);
                Tensor scale = ops::conv2d(abs_of(normed), abs_of(w), &babs, c.stride, c.pad);
                // The normalised input is rounded to t before the product (u_s S), the product before the bias
                // (u_s S), and the statistics differ by float32 rounding over h*w*cin/groups values (u_s S for
                // t != F32; for F32 their own (n + 2) u relative error, n values per group, is added to k).
                const double kk = k + double(c.h) * c.w * c.cin / c.groups;
                expect_close(ops::conv2d_group_norm_silu(xd, c.groups, gamma.to_device(*gpu, t),
                                                         beta.to_device(*gpu, t), 1e-5f, wd, &bd, c.stride, c.pad)
                                 .to_host(),
                             ref, scale, kk, t, 3, name + " +groupnorm+silu");
            }
        }
}

// The tiled VAE decode's pieces: a convolution of SiLU(x * scale + shift) with per-channel scale and shift, a band's
// per-channel sums, and a strided copy of every channel's rows. Composed where the backend has no fused form (a 1x1
// convolution with a diagonal filter), the affine's scale and shift are rounded to t, and so are the affine's output
// and SiLU's: u_s each of |x scale| + |shift|, which bounds every intermediate; SiLU's slope is below 1.1, so
// 4 u_s x 1.1 of the convolution over those magnitudes (factor 5 over abs_in below). Vulkan applies the affine and
// SiLU as the convolution reads (scale and shift rounded to t, the rest float32): fewer roundings, the same bound.
// add_channel_sums over runs longer than one chunk (Vulkan's are 1024 values: 3 chunks here, the last partial), rows
// inside the tensor, values shifted off zero (a mean well above the spread, as activations have), against the host's
// sums in double; the bound: each value's way through a chunk in float32 (4 a thread, a tree of 8, its square) is at
// most 14 roundings of 2^-24, and the chunks add in double.
TEST_P(DeviceOps, ChannelSumsOverManyChunks) {
    Backend* gpu = &this->gpu();
    for (DType t : kiln::test::gpu_dtypes(*gpu)) {
        const Tensor x = random({1, 3, 40, 61}, 44, t, 2.0f, 5.0f);
        const Tensor xd = x.to_device(*gpu, t);
        std::vector<double> sum(3, 1.0), sum_sq(3, 2.0);  // added to, not overwritten
        ops::device_ops(xd).add_channel_sums(xd, 3, 34, sum, sum_sq);
        for (int64_t c = 0; c < 3; ++c) {
            double s = 1.0, q = 2.0, magnitude = 0.0;
            for (int64_t i = 3 * 61; i < 37 * 61; ++i) {
                const double v = x[c * 40 * 61 + i];
                s += v;
                q += v * v;
                magnitude += std::fabs(v);
            }
            const double roundings = 14 * std::ldexp(1.0, -24);
            EXPECT_NEAR(sum[c], s, roundings * magnitude) << dtype_name(t) << " channel " << c;
            EXPECT_NEAR(sum_sq[c], q, roundings * q) << dtype_name(t) << " channel " << c;
        }
    }
}

TEST_P(DeviceOps, TiledDecodePieces) {
    Backend* gpu = &this->gpu();
    for (DType t : kiln::test::gpu_dtypes(*gpu)) {
        const Tensor x = random({1, 6, 7, 5}, 41, t), w = random({4, 6, 3, 3}, 42, t), b = random({4}, 43, t);
        const std::vector<float> scale = {0.5f, -1.25f, 2.0f, 0.75f, 1.0f, -0.5f};
        const std::vector<float> shift = {0.1f, -0.2f, 0.3f, 0.0f, -0.4f, 0.25f};
        Tensor affine = x, abs_in = x;  // x * scale + shift per channel, then SiLU: the reference's input
        for (int64_t c = 0; c < 6; ++c)
            for (int64_t i = 0; i < 35; ++i) {
                affine[c * 35 + i] = x[c * 35 + i] * scale[c] + shift[c];
                abs_in[c * 35 + i] = std::fabs(x[c * 35 + i] * scale[c]) + std::fabs(shift[c]);
            }
        ops::silu_(affine);
        const Tensor ref = ops::conv2d(affine, w, &b, 1, 1);
        Tensor babs = abs_of(b);
        const Tensor bound_scale = ops::conv2d(abs_in, abs_of(w), &babs, 1, 1);
        const Tensor xd = x.to_device(*gpu, t), wd = w.to_device(*gpu, t), bd = b.to_device(*gpu, t);
        expect_close(ops::conv2d_affine_silu(xd, scale, shift, wd, &bd, 1, 1).to_host(), ref, bound_scale, 54.0, t, 5,
                     std::string("conv2d_affine_silu ") + dtype_name(t));
        // Sums of rows 2-5 of each channel, against the host's in double over the same (rounded) values. A backend
        // may add a chunk's values in float32 (Vulkan: 256 threads, then a tree of 8 levels, each value squared
        // once): at most 10 roundings of 2^-24 on each value's way, so 10 * 2^-24 of the sum of magnitudes.
        std::vector<double> sum(6, 0.0), sum_sq(6, 0.0);
        ops::device_ops(xd).add_channel_sums(xd, 2, 4, sum, sum_sq);
        for (int64_t c = 0; c < 6; ++c) {
            double s = 0.0, q = 0.0, magnitude = 0.0;
            for (int64_t i = 2 * 5; i < 6 * 5; ++i) {
                s += x[c * 35 + i];
                q += double(x[c * 35 + i]) * x[c * 35 + i];
                magnitude += std::fabs(x[c * 35 + i]);
            }
            const double roundings = 10 * std::ldexp(1.0, -24);
            EXPECT_NEAR(sum[c], s, roundings * magnitude) << dtype_name(t) << " channel " << c;
            EXPECT_NEAR(sum_sq[c], q, roundings * q) << dtype_name(t) << " channel " << c;
        }
        // Rows 1-3 of every channel into a [1, 6, 3, 5] tensor: bit-exact copies.
        Tensor band = Tensor::empty_on(*gpu, {1, 6, 3, 5}, t);
        const int64_t es = int64_t(dtype_size(t));
        gpu->copy_strided(band.device_data(), 15 * es, static_cast<const char*>(xd.device_data()) + 5 * es, 35 * es,
                          15 * es, 6);
        const Tensor got = band.to_host();
        for (int64_t c = 0; c < 6; ++c)
            for (int64_t i = 0; i < 15; ++i)
                ASSERT_EQ(got[c * 15 + i], x[c * 35 + 5 + i]) << dtype_name(t) << " channel " << c << " value " << i;
    }
}

// The fused convolutions (the VAE's ops::conv2d_group_norm_silu_add_ and ops::conv2d_upsample2x, the UNet's
// ops::conv2d_group_norm_silu_plus): each backend's DeviceOps fuses them or composes them. Two calls each: on
// CUDA the first composes and chooses the route, the second may run fused. The bounds are the composition's: the
// GroupNorm conv's (above) plus the added term's rounding, and conv2d's. CUDA and Vulkan fuse the added terms
// into the product's epilogue, summed in float32 before the one rounding to t: fewer roundings than the
// composition's, so its bound holds (the bits may differ from the composition's by that rounding). Shapes cut
// the product tiles: 1, 31 and 33 channels, 1x1 and 3x3 filters, stride 1 and 2, padding 0 and 1.
TEST_P(DeviceOps, ResidualAndUpsampledConvolutions) {
    Backend* gpu = &this->gpu();
    struct C {
        int n, cin, h, w, cout, k, stride, pad, groups;
    };
    for (DType t : kiln::test::gpu_dtypes(*gpu))
        for (C c : {C{2, 16, 9, 7, 8, 3, 1, 1, 4}, C{1, 33, 6, 5, 31, 3, 2, 0, 3}, C{2, 31, 4, 5, 33, 3, 2, 1, 1},
                    C{1, 1, 3, 2, 1, 1, 1, 0, 1}}) {
            const int n = c.n, cin = c.cin, h = c.h, w = c.w, cout = c.cout, groups = c.groups;
            const std::string shape = " " + std::to_string(cin) + "x" + std::to_string(h) + "x" + std::to_string(w) +
                                      "->" + std::to_string(cout) + " k" + std::to_string(c.k) + " s" +
                                      std::to_string(c.stride) + " p" + std::to_string(c.pad);
            Tensor x = random({n, cin, h, w}, 41, t), wt = random({cout, cin, c.k, c.k}, 42, t), b = random({cout}, 43, t);
            Tensor gamma = random({cin}, 44, t, 0.5f, 1.5f), beta = random({cin}, 45, t);
            Tensor babs = abs_of(b);
            Tensor ref = ops::conv2d_group_norm_silu(x, groups, gamma, beta, 1e-5f, wt, &b, c.stride, c.pad);
            Tensor acc = random(ref.shape(), 46, t, -2.0f, 2.0f);
            ops::add_(ref, acc);
            Tensor normed = ops::group_norm(x, groups, gamma, beta, 1e-5f);
            ops::silu_(normed);
            Tensor scale = abs_of(acc);
            ops::add_(scale, ops::conv2d(abs_of(normed), abs_of(wt), &babs, c.stride, c.pad));
            Tensor up = ops::upsample_nearest2x(x);
            Tensor up_ref = ops::conv2d(up, wt, &b, c.stride, c.pad);
            Tensor up_scale = ops::conv2d(abs_of(up), abs_of(wt), &babs, c.stride, c.pad);
            Tensor image_bias = random({n, cout}, 47, t);
            // y_bias: the shortcut's bias added to y before the sum (the CPU's form is the reference).
            Tensor y_bias = random({cout}, 50, t), ref_shift = acc, scale_shift = scale;
            ops::conv2d_group_norm_silu_add_(ref_shift, x, groups, gamma, beta, 1e-5f, wt, &b, c.stride, c.pad, &y_bias);
            std::vector<float> yb_abs;
            for (int i = 0; i < n; ++i)
                for (float v : y_bias.values()) yb_abs.push_back(std::fabs(v));
            ops::add_channel_bias_(scale_shift, Tensor({n, cout}, yb_abs));
            Tensor plus_ref =
                ops::conv2d_group_norm_silu_plus(x, groups, gamma, beta, 1e-5f, wt, &b, image_bias, 0, c.stride, c.pad);
            // The UNet's form: the same bias at column 5 of a wider one (every block's time projection, one product).
            Tensor wide_bias = ops::concat_channels(random({n, 5, 1}, 48, t), image_bias.reshaped({n, cout, 1}));
            wide_bias = ops::concat_channels(wide_bias, random({n, 2, 1}, 49, t)).reshaped({n, cout + 7});
            Tensor plus_scale = ops::conv2d(abs_of(normed), abs_of(wt), &babs, c.stride, c.pad);
            ops::add_channel_bias_(plus_scale, abs_of(image_bias));
            Tensor xd = x.to_device(*gpu, t), wd = wt.to_device(*gpu, t), bd = b.to_device(*gpu, t);
            Tensor gd = gamma.to_device(*gpu, t), betad = beta.to_device(*gpu, t), ibd = image_bias.to_device(*gpu, t);
            Tensor wide_d = wide_bias.to_device(*gpu, t), ybd = y_bias.to_device(*gpu, t);
            const double k = double(cin) * c.k * c.k, kn = k + double(h) * w * cin / groups;
            for (int call = 1; call <= 2; ++call) {
                const std::string tag = shape + ", call " + std::to_string(call);
                Tensor accd = acc.to_device(*gpu, t);
                ops::conv2d_group_norm_silu_add_(accd, xd, groups, gd, betad, 1e-5f, wd, &bd, c.stride, c.pad);
                expect_close(accd.to_host(), ref, scale, kn, t, 4, "conv2d_group_norm_silu_add_" + tag);
                Tensor shifted = acc.to_device(*gpu, t);
                ops::conv2d_group_norm_silu_add_(shifted, xd, groups, gd, betad, 1e-5f, wd, &bd, c.stride, c.pad, &ybd);
                expect_close(shifted.to_host(), ref_shift, scale_shift, kn, t, 5,
                             "conv2d_group_norm_silu_add_ with y_bias" + tag);
                expect_close(ops::conv2d_upsample2x(xd, wd, &bd, c.stride, c.pad).to_host(), up_ref, up_scale, k, t, 1,
                             "conv2d_upsample2x" + tag);
                expect_close(
                    ops::conv2d_group_norm_silu_plus(xd, groups, gd, betad, 1e-5f, wd, &bd, ibd, 0, c.stride, c.pad)
                        .to_host(),
                    plus_ref, plus_scale, kn, t, 4, "conv2d_group_norm_silu_plus" + tag);
                expect_close(
                    ops::conv2d_group_norm_silu_plus(xd, groups, gd, betad, 1e-5f, wd, &bd, wide_d, 5, c.stride, c.pad)
                        .to_host(),
                    plus_ref, plus_scale, kn, t, 4, "conv2d_group_norm_silu_plus at column 5" + tag);
            }
        }
}

TEST_P(DeviceOps, AttentionFlashAndProducts) {
    Backend* gpu = &this->gpu();
    struct A {
        int b, lq, lk, heads, d;
        bool causal;
    };
    for (DType t : kiln::test::gpu_dtypes(*gpu))
        // Vulkan's flash kernel takes heads of up to 256 dimensions in builds of 32 to 256 columns, 64 queries per
        // workgroup and keys 64 at a time: partial blocks, tiles and builds, and causal masks crossing tiles are covered.
        for (A a : {A{1, 77, 77, 2, 64, true}, A{2, 33, 77, 3, 40, false}, A{1, 64, 64, 1, 512, false},
                    A{1, 5, 9, 1, 300, true}, A{1, 130, 200, 2, 160, false}, A{2, 70, 129, 2, 80, true},
                    A{1, 65, 65, 1, 256, true}, A{1, 3, 5, 4, 8, false}}) {
            const int hd = a.heads * a.d;
            Tensor q = random({a.b, a.lq, hd}, 9, t), k = random({a.b, a.lk, hd}, 10, t), v = random({a.b, a.lk, hd}, 11, t);
            Tensor ref = ops::attention(q, k, v, a.heads, a.causal);
            // Scale: the attention of |v| with the same weights bounds sum_j p_j |v_j|; the scores' error
            // (d + 2) u sum|q||k| / sqrt(d) <= (d + 2) u d / sqrt(d) moves each weight by that factor (|q|,|k| <= 1).
            Tensor scale = ops::attention(q, k, abs_of(v), a.heads, a.causal);
            const double score_err = (a.d + 2) * std::sqrt(double(a.d));
            expect_close(ops::attention(q.to_device(*gpu, t), k.to_device(*gpu, t), v.to_device(*gpu, t), a.heads,
                                        a.causal)
                             .to_host(),
                         ref, scale, score_err + a.lk, t, 2,
                         "attention " + std::to_string(a.lq) + "x" + std::to_string(a.lk) + " d" + std::to_string(a.d) +
                             (a.causal ? " causal" : ""));
            if (a.causal) continue;
            // The same attention over projections side by side (one product's output): q | k | v of each token
            // (self, when the lengths agree), q with k | v (cross). Within the same bound of the host's.
            const std::string tag = std::to_string(a.lq) + "x" + std::to_string(a.lk) + " d" + std::to_string(a.d);
            Tensor kv = ops::concat_channels(k.reshaped({a.b * a.lk, hd, 1}), v.reshaped({a.b * a.lk, hd, 1}))
                            .reshaped({a.b, a.lk, 2 * hd});
            EXPECT_EQ(ops::columns(kv.to_device(*gpu, t), hd, hd).to_host().values(), v.values()) << "columns " << tag;
            expect_close(ops::attention_kv(q.to_device(*gpu, t), kv.to_device(*gpu, t), a.heads).to_host(), ref, scale,
                         score_err + a.lk, t, 2, "attention_kv " + tag);
            // The same k | v after another attention's in one wider product's output, read at its column.
            Tensor other = random({a.b * a.lk, 2 * hd, 1}, 12, t);
            Tensor wide = ops::concat_channels(other, kv.reshaped({a.b * a.lk, 2 * hd, 1})).reshaped({a.b, a.lk, 4 * hd});
            expect_close(ops::attention_kv(q.to_device(*gpu, t), wide.to_device(*gpu, t), a.heads, 2 * hd).to_host(),
                         ref, scale, score_err + a.lk, t, 2, "attention_kv within a wider product " + tag);
            if (a.lq == a.lk) {
                Tensor qkv = ops::concat_channels(q.reshaped({a.b * a.lq, hd, 1}), kv.reshaped({a.b * a.lk, 2 * hd, 1}))
                                 .reshaped({a.b, a.lq, 3 * hd});
                expect_close(ops::attention_qkv(qkv.to_device(*gpu, t), a.heads).to_host(), ref, scale,
                             score_err + a.lk, t, 2, "attention_qkv " + tag);
            }
        }
}

TEST_P(DeviceOps, ElementwiseLayoutAndNorms) {
    Backend* gpu = &this->gpu();
    for (DType t : kiln::test::gpu_dtypes(*gpu)) {
        Tensor x = random({2, 6, 5, 7}, 12, t), y = random({2, 6, 5, 7}, 13, t);
        Tensor xd = x.to_device(*gpu, t), yd = y.to_device(*gpu, t);
        Tensor absx = abs_of(x);
        auto check = [&](const Tensor& dev, const Tensor& ref, double k, const std::string& what) {
            Tensor mag = abs_of(ref);
            for (int64_t i = 0; i < mag.numel(); ++i) mag[i] = std::max(mag[i], 1.0f);  // O(1) inputs
            expect_close(dev, ref, mag, k, t, 0, what);
        };
        check(ops::upsample_nearest2x(xd).to_host(), ops::upsample_nearest2x(x), 0, "upsample_nearest2x");
        check(ops::concat_channels(xd, yd).to_host(), ops::concat_channels(x, y), 0, "concat_channels");
        check(ops::nchw_to_nlc(xd).to_host(), ops::nchw_to_nlc(x), 0, "nchw_to_nlc");
        check(ops::nlc_to_nchw(ops::nchw_to_nlc(xd), 5, 7).to_host(), x, 0, "nlc_to_nchw");
        // A transformer's way in and out: the device's fused forms give its compositions' bits exactly (the layout
        // change is a copy), here and on shapes of 1 and 33 channels, a single row and a single pixel.
        for (Shape s : {Shape{2, 6, 5, 7}, Shape{1, 33, 3, 1}, Shape{2, 3, 1, 1}, Shape{1, 1, 2, 3}}) {
            const int64_t c = s[1], groups = c % 3 == 0 ? 3 : 1;
            Tensor a = random(s, 12, t).to_device(*gpu, t), tokens = random({s[0], s[2] * s[3], c}, 13, t).to_device(*gpu, t);
            Tensor g = random({c}, 18, t, 0.5f, 1.5f).to_device(*gpu, t), b = random({c}, 19, t).to_device(*gpu, t);
            const std::string tag = " " + shape_str(s) + " " + dtype_name(t);
            EXPECT_EQ(ops::group_norm_to_nlc(a, int(groups), g, b, 1e-5f).to_host().values(),
                      ops::nchw_to_nlc(ops::group_norm(a, int(groups), g, b, 1e-5f)).to_host().values())
                << "group_norm_to_nlc" << tag;
            Tensor composed = a, fused = a;
            ops::add_(composed, ops::nlc_to_nchw(tokens, s[2], s[3]));
            ops::add_nlc_(fused, tokens);
            EXPECT_EQ(fused.to_host().values(), composed.to_host().values()) << "add_nlc_" << tag;
        }
        {
            Tensor a = x, ad = xd;
            ops::add_(a, y);
            ops::add_(ad, yd);
            check(ad.to_host(), a, 1, "add_");
        }
        // Activations: a few roundings of exp/erf/tanh in float32 on both sides (k = 4), over [-1, 1] and a
        // range where exp overflows for the naive formulas.
        for (float range : {1.0f, 60.0f}) {
            Tensor xr = random({2, 6, 5, 7}, 21, t, -range, range);
            Tensor xrd = xr.to_device(*gpu, t);
            const std::string tag = range > 1 ? " (|x| <= 60)" : "";
            for (auto [f, name] : {std::pair{&ops::silu_, "silu_"}, {&ops::gelu_, "gelu_"},
                                   {&ops::gelu_tanh_, "gelu_tanh_"}, {&ops::quick_gelu_, "quick_gelu_"}}) {
                Tensor a = xr, ad = xrd;
                f(a);
                f(ad);
                check(ad.to_host(), a, 4, std::string(name) + tag);
            }
        }
        {
            Tensor a = x, ad = xd;
            ops::scale_(a, 0.18215f);
            ops::scale_(ad, 0.18215f);
            check(ad.to_host(), a, 1, "scale_");
            Tensor bias = random({2, 6}, 22, t), c = x, cd = xd;
            ops::add_channel_bias_(c, bias);
            ops::add_channel_bias_(cd, bias.to_device(*gpu, t));
            check(cd.to_host(), c, 1, "add_channel_bias_");
        }
        {
            Tensor g = random({6}, 14, t, 0.5f, 1.5f), b = random({6}, 15, t);
            // Statistics over 3 channels x 35 values in float32 on both sides.
            check(ops::group_norm(xd, 2, g.to_device(*gpu, t), b.to_device(*gpu, t), 1e-5f).to_host(),
                  ops::group_norm(x, 2, g, b, 1e-5f), 3 * 35 * 4, "group_norm");
            // Groups of 2 x 5200 values: both GPU backends reduce groups of 8192 values or more in chunks of
            // 4096 by many blocks (the last one shorter here), the same float32 sums in another order.
            Tensor big = random({1, 4, 80, 65}, 23, t), bg = random({4}, 24, t, 0.5f, 1.5f), bb = random({4}, 25, t);
            check(ops::group_norm(big.to_device(*gpu, t), 2, bg.to_device(*gpu, t), bb.to_device(*gpu, t), 1e-5f)
                      .to_host(),
                  ops::group_norm(big, 2, bg, bb, 1e-5f), 2 * 5200 * 4, "group_norm (chunked)");
            // More groups than a grid row holds (65535): 70000 groups of 2 values one apart (so each group's
            // variance is 1/4, not the ill-conditioned spread of two random values).
            Tensor many = random({1, 70000, 2}, 26, t), mg = random({70000}, 27, t, 0.5f, 1.5f),
                   mb = random({70000}, 28, t);
            for (int64_t g = 0; g < 70000; ++g) many[2 * g + 1] = many[2 * g] + 1.0f;
            many = many.converted(t).to_f32();  // representable in t, as random() makes every input
            check(ops::group_norm(many.to_device(*gpu, t), 70000, mg.to_device(*gpu, t), mb.to_device(*gpu, t), 1e-5f)
                      .to_host(),
                  ops::group_norm(many, 70000, mg, mb, 1e-5f), 2 * 4, "group_norm (70000 groups)");
            Tensor lg = random({7}, 16, t, 0.5f, 1.5f), lb = random({7}, 17, t);
            check(ops::layer_norm(xd, lg.to_device(*gpu, t), lb.to_device(*gpu, t), 1e-5f).to_host(),
                  ops::layer_norm(x, lg, lb, 1e-5f), 7 * 4, "layer_norm");
        }
        {
            Tensor g = random({3, 10}, 20, t);
            check(ops::geglu(g.to_device(*gpu, t)).to_host(), ops::geglu(g), 8, "geglu");
        }
        check(ops::softmax_lastdim(xd).to_host(), ops::softmax_lastdim(x), 7 * 4, "softmax_lastdim");
        (void)absx;
    }
}

TEST_P(DeviceOps, TimestepEmbeddingAndErrors) {
    Backend* gpu = &this->gpu();
    // SD's timesteps over the whole schedule, fractional ones (some samplers), odd and even widths, both orders.
    std::vector<float> steps{999.0f, 1.0f, 500.5f, 0.0f};
    for (int i = 0; i < 64; ++i) steps.push_back(std::round(999.0f * float(i) / 63.0f * 4.0f) / 4.0f);
    const Tensor ts({int64_t(steps.size())}, steps);
    for (auto [dim, flip, shift] : {std::tuple{33, true, 1.0f}, {320, true, 0.0f}, {256, false, 1.0f}}) {
        Tensor ref = ops::timestep_embedding(ts, dim, flip, shift, DType::F32);
        Tensor dev = ops::timestep_embedding(ts.to_device(*gpu, DType::F32), dim, flip, shift, DType::F32).to_host();
        // sin/cos of the same float32 argument (the frequencies are the host's on every backend). The CPU
        // rounds correctly (0.5 ulp); a GPU's sinf/cosf (CUDA: 2 ulp, documented) or the Vulkan shader's own
        // reduction and polynomials (about 2 ulp) add up to 2.5 ulp of values below 1: 2.5 x 2^-24.
        double worst = 0;
        for (int64_t i = 0; i < ref.numel(); ++i) worst = std::max(worst, std::fabs(double(dev[i]) - ref[i]));
        EXPECT_LE(worst, 2.5 * std::ldexp(1.0, -24)) << "dim " << dim;
        std::printf("[ device ops ] timestep_embedding dim %d: worst %.2e (bound %.2e)\n", dim, worst,
                    2.5 * std::ldexp(1.0, -24));
    }
    // An operand left on the host is a clear error, not a crash.
    const DType t = gpu->supports(DType::F16) ? DType::F16 : DType::F32;
    Tensor x = random({2, 4}, 18, t).to_device(*gpu, t), w = random({3, 4}, 19, DType::F32);
    try {
        ops::linear(x, w, nullptr);
        ADD_FAILURE() << "no error for a host weight";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("not on " + device_name(gpu->device())), std::string::npos) << e.what();
    }
}

TEST_P(DeviceOps, MemoryAccountingAgreesWithTheDevice) {
    Backend* gpu = &this->gpu();
    gpu->synchronize();
    const DeviceMemoryInfo before = gpu->memory_info();
    const int64_t reserved_before = gpu->reserved_bytes();
    {
        Tensor big = Tensor::empty_on(*gpu, {128, 1024, 1024}, DType::F32);  // 512 MiB
        gpu->synchronize();
        const DeviceMemoryInfo during = gpu->memory_info();
        const int64_t driver_delta = before.free - during.free, ours = gpu->reserved_bytes() - reserved_before;
        // The driver maps in 2 MiB pages; the allocator rounds to 2 MiB: the two agree within a few pages.
        // (A Vulkan driver without VK_EXT_memory_budget, such as lavapipe, reports no usage of its own: there
        // the free figure is the heap less what kiln holds, and this compares kiln with itself.)
        EXPECT_NEAR(double(driver_delta), double(ours), 8.0 * (1 << 20)) << driver_delta << " vs " << ours;
        EXPECT_EQ(memory_stats().device(device_name(gpu->device())).total.current >= int64_t(512) << 20, true);
    }
    // Out of memory (on Vulkan, beyond the largest single allocation) is a typed, recoverable error naming
    // the bytes.
    try {
        Tensor huge = Tensor::empty_on(*gpu, {int64_t(1) << 40}, DType::F32);
        ADD_FAILURE() << "4 TiB allocated?";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory) << e.what();
        EXPECT_NE(std::string(e.what()).find("MiB"), std::string::npos) << e.what();
    }
    Tensor after = Tensor::empty_on(*gpu, {1024}, DType::F32);  // the backend still works
    EXPECT_EQ(after.numel(), 1024);
}

// Backend::run_recorded: the first call runs eagerly, the second records, later calls replay the recording
// with new inputs without calling the function (CUDA graphs, Vulkan command buffers). A function that needs
// the host inside (an upload) cannot be recorded: it keeps running eagerly, with right results.
TEST_P(DeviceOps, RecordedCallsReplayWithNewInputs) {
    Backend* gpu = &this->gpu();
    int calls = 0, host_calls = 0;
    const Backend::RecordedFn triple = [&](const std::vector<const Tensor*>& in) {
        ++calls;
        Tensor y = *in[0];
        ops::scale_(y, 2.0f);
        ops::add_(y, *in[0]);
        return y;
    };
    const Backend::RecordedFn with_upload = [&](const std::vector<const Tensor*>& in) {
        ++host_calls;
        Tensor y = *in[0];
        ops::add_(y, Tensor({3}, {1.0f, 1.0f, 1.0f}).to_device(*gpu, DType::F32));
        return y;
    };
    for (int i = 0; i < 5; ++i) {
        const Tensor x = Tensor({3}, {float(i), float(i) + 0.5f, -float(i)}).to_device(*gpu, DType::F32);
        const Tensor y = gpu->run_recorded("test triple", {&x}, triple).to_host();
        const Tensor z = gpu->run_recorded("test upload", {&x}, with_upload).to_host();
        for (int j = 0; j < 3; ++j) {
            const float v = x.to_host()[j];
            EXPECT_EQ(y[j], 3.0f * v) << "call " << i;
            EXPECT_EQ(z[j], v + 1.0f) << "call " << i;
        }
    }
    EXPECT_EQ(calls, 2) << "the third to fifth calls should have replayed the recording";
    EXPECT_EQ(host_calls, 6) << "five eager calls and the attempt to record the second";
}

// Past the bound on recordings (ops/call_recorder.h), making one evicts the least recently replayed (its graph
// or command buffer and its pool go, after a wait for the device): that key records again at its next call,
// the others replay on, all with right results. Recordings of earlier tests are older still and go first.
TEST_P(DeviceOps, RecordingsPastTheBoundEvictTheLeastRecentlyUsed) {
    if (std::getenv("KILN_RECORDINGS_MAX")) GTEST_SKIP() << "KILN_RECORDINGS_MAX is set: the bound is not the default";
    Backend* gpu = &this->gpu();
    const int bound = ops::kDefaultMaxRecordings;
    std::vector<int> calls(size_t(bound) + 1, 0);
    auto run = [&](int i, float v) {
        const Backend::RecordedFn times = [&calls, i](const std::vector<const Tensor*>& in) {
            ++calls[size_t(i)];
            Tensor y = *in[0];
            ops::scale_(y, float(i + 2));
            return y;
        };
        const Tensor x = Tensor({2}, {v, -v}).to_device(*gpu, DType::F32);
        const Tensor y = gpu->run_recorded("test eviction " + std::to_string(i), {&x}, times).to_host();
        EXPECT_EQ(y[0], float(i + 2) * v) << "key " << i;
        EXPECT_EQ(y[1], -float(i + 2) * v) << "key " << i;
    };
    for (int i = 0; i < bound; ++i) {  // eager, then recorded: the bound's worth
        run(i, 1.0f);
        run(i, 2.0f);
    }
    for (int i = 1; i < bound; ++i) run(i, 3.0f);  // key 0 is now the least recently used
    run(bound, 1.0f);
    run(bound, 2.0f);  // recording it evicts key 0
    for (int i = 1; i <= bound; ++i) run(i, 4.0f);
    for (int i = 1; i <= bound; ++i) EXPECT_EQ(calls[size_t(i)], 2) << "key " << i << " should have replayed";
    run(0, 5.0f);
    EXPECT_EQ(calls[0], 3) << "key 0 was evicted: its next call records it again";
    run(0, 6.0f);
    EXPECT_EQ(calls[0], 3) << "key 0 should replay its new recording";
    gpu->forget_recordings("test eviction ");
}
