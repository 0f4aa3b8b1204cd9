// The int8 products of Q8_0 weights (ops/int8_dot.h) through linear and conv2d, on every ISA path this CPU
// has, each forced in turn: against a float64 reference on the dequantized weights within a bound derived
// from the two roundings; bit for bit against the scalar path (all paths do the same operations in the same
// order); odd shapes (1 row or column, tails of the register blocks, several panels, im2col tiles);
// non-finite activations; and KILN_CPU_Q8's dequantize setting, which gives the float path's bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "harness.h"
#include "ops/cpu_q8_products.h"
#include "ops/int8_dot.h"
#include "ops/ops.h"
#include "ops/tuning.h"

namespace kiln::ops::testing {
namespace {

using detail::Int8Isa;
constexpr Int8Isa kIsas[] = {Int8Isa::Scalar, Int8Isa::Avx2, Int8Isa::Avx512Vnni};

// Forces one path while alive.
struct ForcedIsa {
    explicit ForcedIsa(Int8Isa isa) : saved(detail::int8_isa()) { detail::force_int8_isa(isa); }
    ~ForcedIsa() { detail::force_int8_isa(saved); }
    Int8Isa saved;
};

// One output's float64 reference sum_k x_k w_k + bias and its bound. The int8 path computes
// sum_b fl(dx_b dw_b) D_b with D_b the exact integer dot of the codes, summed by fma in block order, then adds
// onto the bias. (1) Activation rounding: dx = fl(amax / 127) <= (amax / 127)(1 + u); q = round(fl(x fl(1/dx))),
// where fl(x fl(1/dx)) is x / dx within 2.01u relative, |x / dx| <= 127 (1 + u): so |q dx - x| <= dx (0.5 + 256u)
// =: e per value (a block under 1e-30 becomes zeros: e = amax); the weights are the dequantized values exactly.
// (2) Float arithmetic: each term fl(dx dw) D_b is off by u relative, B fma additions and the bias add give at
// most (B + 2) u more on the sum of |terms| <= sum_k (|x_k| + e) |w_k| + |bias|: bound (B + 3) 1.01 u that.
struct Expected {
    double value, bound;
};
Expected expected_output(const float* x, int64_t x_stride, const float* w, int64_t k, float bias) {
    double sum = bias, rounding = 0, magnitude = std::fabs(bias);
    for (int64_t b0 = 0; b0 < k; b0 += 32) {
        double amax = 0;
        for (int64_t i = b0; i < b0 + 32; ++i) amax = std::max(amax, std::fabs(double(x[i * x_stride])));
        const double e = amax < 1e-30 ? amax : (amax / 127) * (1 + kU) * (0.5 + 256 * kU);
        for (int64_t i = b0; i < b0 + 32; ++i) {
            sum += double(x[i * x_stride]) * w[i];
            rounding += e * std::fabs(w[i]);
            magnitude += (std::fabs(double(x[i * x_stride])) + e) * std::fabs(w[i]);
        }
    }
    return {sum, rounding + double(k / 32 + 3) * 1.01 * kU * magnitude};
}

Tensor q8_weight(const Shape& shape, uint64_t seed) { return random_tensor(shape, seed).converted(DType::Q8_0); }

// |actual - expected| <= bound everywhere; some outputs must differ from the dequantized product (else the
// int8 path did not run).
void expect_within(const Tensor& actual, const Tensor& dequantized, const std::vector<Expected>& want,
                   const std::string& what) {
    ASSERT_EQ(actual.numel(), int64_t(want.size())) << what;
    double worst = 0;
    bool differs = false;
    for (int64_t i = 0; i < actual.numel(); ++i) {
        const double err = std::fabs(double(actual.data()[i]) - want[size_t(i)].value);
        ASSERT_LE(err, want[size_t(i)].bound) << what << ": output " << i << " = " << actual.data()[i]
                                              << ", reference " << want[size_t(i)].value;
        worst = std::max(worst, err / want[size_t(i)].bound);
        differs = differs || actual.data()[i] != dequantized.data()[i];
    }
    EXPECT_TRUE(differs) << what << ": the int8 path gave the dequantized path's bits";
    std::printf("[ int8 ] %-40s worst error / bound %.3f\n", what.c_str(), worst);
}

bool same_bits(const Tensor& a, const Tensor& b) {
    return a.numel() == b.numel() && std::memcmp(a.data(), b.data(), size_t(a.numel()) * sizeof(float)) == 0;
}

struct LinearShape {
    int64_t rows, in, out;
    bool bias;
};

// linear's shapes: 1 row or output; rows past a group of 16 and a block of 3 groups; outputs past a block of 4
// rows; K of 1 block to 64; 200 rows x 64 blocks span 3 panels of columns, the last one short.
constexpr LinearShape kLinearShapes[] = {{1, 32, 1, true},    {1, 64, 5, false},    {3, 96, 4, true},
                                         {17, 160, 9, true},  {16, 32, 16, false},  {50, 288, 13, true},
                                         {33, 1024, 7, false}, {200, 2048, 6, true}};

void check_linear(const LinearShape& s, uint64_t seed) {
    const Tensor x = random_tensor({s.rows, s.in}, seed, -2.0f, 2.0f);
    const Tensor wq = q8_weight({s.out, s.in}, seed + 1), w = wq.to_f32();
    const Tensor b = random_tensor({s.out}, seed + 2);
    const Tensor* bp = s.bias ? &b : nullptr;
    std::vector<Expected> want;
    for (int64_t r = 0; r < s.rows; ++r)
        for (int64_t o = 0; o < s.out; ++o)
            want.push_back(
                expected_output(x.data() + r * s.in, 1, w.data() + o * s.in, s.in, s.bias ? b.data()[o] : 0.0f));
    const std::string name = "linear " + std::to_string(s.rows) + "x" + std::to_string(s.in) + "->" +
                             std::to_string(s.out) + " " + detail::int8_isa_name(detail::int8_isa());
    expect_within(linear(x, wq, bp), linear(x, w, bp), want, name);
}

struct ConvShape {
    int64_t n, c, h, w, o, k;
    int stride, padding;
    int64_t im2col_budget;  // bytes; 0: the default
};

// 3x3 with padding (9 blocks a row), a 1x1 (read in place, 2 blocks), stride 2, and tiles of 10 pixels.
constexpr ConvShape kConvShapes[] = {{2, 32, 7, 9, 5, 3, 1, 1, 0},
                                     {1, 64, 5, 6, 3, 1, 1, 0, 0},
                                     {1, 32, 9, 8, 7, 3, 2, 1, 0},
                                     {1, 32, 6, 7, 6, 3, 1, 1, 32 * 9 * 4 * 10}};

void check_conv(const ConvShape& s, uint64_t seed) {
    const Tensor x = random_tensor({s.n, s.c, s.h, s.w}, seed, -2.0f, 2.0f);
    const Tensor wq = q8_weight({s.o, s.c, s.k, s.k}, seed + 1), w = wq.to_f32();
    const Tensor b = random_tensor({s.o}, seed + 2);
    const int64_t budget = s.im2col_budget ? s.im2col_budget : detail::kIm2colBudgetBytes;
    const Tensor y = detail::conv2d_tiled(x, wq, &b, s.stride, s.padding, budget);
    const int64_t ho = y.dim(2), wo = y.dim(3), kk = s.c * s.k * s.k;
    std::vector<Expected> want;
    std::vector<float> column(size_t(kk), 0.0f);
    for (int64_t n = 0; n < s.n; ++n)
        for (int64_t o = 0; o < s.o; ++o)
            for (int64_t oy = 0; oy < ho; ++oy)
                for (int64_t ox = 0; ox < wo; ++ox) {
                    for (int64_t c = 0; c < s.c; ++c)  // the input column of this pixel, w's order
                        for (int64_t i = 0; i < s.k; ++i)
                            for (int64_t j = 0; j < s.k; ++j) {
                                const int64_t iy = oy * s.stride - s.padding + i, ix = ox * s.stride - s.padding + j;
                                const bool in = iy >= 0 && iy < s.h && ix >= 0 && ix < s.w;
                                column[size_t((c * s.k + i) * s.k + j)] =
                                    in ? x.data()[((n * s.c + c) * s.h + iy) * s.w + ix] : 0.0f;
                            }
                    want.push_back(expected_output(column.data(), 1, w.data() + o * kk, kk, b.data()[o]));
                }
    const std::string name = "conv2d c" + std::to_string(s.c) + " " + std::to_string(s.k) + "x" +
                             std::to_string(s.k) + " s" + std::to_string(s.stride) + " " +
                             detail::int8_isa_name(detail::int8_isa());
    expect_within(y, detail::conv2d_tiled(x, w, &b, s.stride, s.padding, budget), want, name);
}

TEST(Int8Dot, LinearWithinTheRoundingBoundOnEveryPath) {
    for (Int8Isa isa : kIsas) {
        if (!detail::int8_isa_available(isa)) continue;
        ForcedIsa forced(isa);
        uint64_t seed = 500;
        for (const LinearShape& s : kLinearShapes) check_linear(s, seed += 3);
    }
}

TEST(Int8Dot, Conv2dWithinTheRoundingBoundOnEveryPath) {
    for (Int8Isa isa : kIsas) {
        if (!detail::int8_isa_available(isa)) continue;
        ForcedIsa forced(isa);
        uint64_t seed = 600;
        for (const ConvShape& s : kConvShapes) check_conv(s, seed += 3);
    }
}

// Every path does the same integer dots and the same float operations in the same order.
TEST(Int8Dot, PathsAgreeBitForBit) {
    const Tensor x = random_tensor({37, 320}, 701, -3.0f, 3.0f), wq = q8_weight({11, 320}, 702);
    const Tensor xc = random_tensor({1, 32, 9, 7}, 703), wc = q8_weight({6, 32, 3, 3}, 704), b = random_tensor({6}, 705);
    Tensor want_linear, want_conv;
    {
        ForcedIsa forced(Int8Isa::Scalar);
        want_linear = linear(x, wq, nullptr);
        want_conv = conv2d(xc, wc, &b, 1, 1);
    }
    for (Int8Isa isa : kIsas) {
        if (!detail::int8_isa_available(isa)) continue;
        ForcedIsa forced(isa);
        EXPECT_TRUE(same_bits(linear(x, wq, nullptr), want_linear)) << detail::int8_isa_name(isa);
        EXPECT_TRUE(same_bits(conv2d(xc, wc, &b, 1, 1), want_conv)) << detail::int8_isa_name(isa);
    }
}

// The fused convolutions make the same columns as conv2d on the materialised input (conv2d_impl.h), so their
// int8 products are those bits too.
TEST(Int8Dot, FusedConvolutionsGiveConv2dsBits) {
    const Tensor x = random_tensor({2, 32, 6, 5}, 711), w = q8_weight({7, 32, 3, 3}, 712), b = random_tensor({7}, 713);
    const Tensor gamma = random_tensor({32}, 714, 0.5f, 1.5f), beta = random_tensor({32}, 715);
    Tensor normed = group_norm(x, 8, gamma, beta, 1e-5f);
    silu_(normed);
    EXPECT_TRUE(same_bits(conv2d_group_norm_silu(x, 8, gamma, beta, 1e-5f, w, &b, 1, 1), conv2d(normed, w, &b, 1, 1)));
    EXPECT_TRUE(same_bits(conv2d_upsample2x(x, w, &b, 1, 1), conv2d(upsample_nearest2x(x), w, &b, 1, 1)));
    Tensor acc = random_tensor({2, 7, 6, 5}, 716), sum = random_tensor({2, 7, 6, 5}, 716);
    conv2d_group_norm_silu_add_(acc, x, 8, gamma, beta, 1e-5f, w, &b, 1, 1);
    add_(sum, conv2d(normed, w, &b, 1, 1));
    EXPECT_TRUE(same_bits(acc, sum));
}

// A NaN or infinite activation: the float path makes every output that reads it NaN or +-inf; the int8 path
// makes those outputs NaN (the block's scale is NaN) and no others.
TEST(Int8Dot, NonFiniteActivationsGiveNonFiniteOutputsWhereTheFloatPathDoes) {
    const Tensor wq = q8_weight({9, 96}, 721), w = wq.to_f32();
    const Tensor wc = q8_weight({5, 32, 3, 3}, 722), wcf = wc.to_f32();
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        for (Int8Isa isa : kIsas) {
            if (!detail::int8_isa_available(isa)) continue;
            ForcedIsa forced(isa);
            Tensor x = random_tensor({19, 96}, 723);
            x.data()[5 * 96 + 40] = bad;
            const Tensor y = linear(x, wq, nullptr), yf = linear(x, w, nullptr);
            for (int64_t i = 0; i < y.numel(); ++i) {
                ASSERT_EQ(std::isfinite(y.data()[i]), std::isfinite(yf.data()[i])) << "linear output " << i;
                if (!std::isfinite(y.data()[i])) {
                    EXPECT_TRUE(std::isnan(y.data()[i]));
                }
            }
            Tensor xc = random_tensor({1, 32, 6, 7}, 724);
            xc.data()[(3 * 6 + 2) * 7 + 4] = bad;
            const Tensor yc = conv2d(xc, wc, nullptr, 1, 1), ycf = conv2d(xc, wcf, nullptr, 1, 1);
            int64_t non_finite = 0;
            for (int64_t i = 0; i < yc.numel(); ++i) {
                ASSERT_EQ(std::isfinite(yc.data()[i]), std::isfinite(ycf.data()[i])) << "conv2d output " << i;
                non_finite += !std::isfinite(yc.data()[i]);
            }
            EXPECT_EQ(non_finite, 5 * 9) << "the 3x3 window around the value, in each output channel";
        }
    }
}

// KILN_CPU_Q8=dequantize: the float path on the dequantized weights, bit for bit (what the GPU tests compare with).
TEST(Int8Dot, DequantizeSettingGivesTheFloatPath) {
    const Tensor x = random_tensor({2, 5, 64}, 731), wq = q8_weight({31, 64}, 732), b = random_tensor({31}, 733);
    const Tensor xc = random_tensor({1, 32, 5, 6}, 734), wc = q8_weight({4, 32, 3, 3}, 735);
    const ScopedCpuQ8Products exact(CpuQ8Products::Dequantize);
    EXPECT_TRUE(same_bits(linear(x, wq, &b), linear(x, wq.to_f32(), &b)));
    EXPECT_TRUE(same_bits(conv2d(xc, wc, nullptr, 1, 1), conv2d(xc, wc.to_f32(), nullptr, 1, 1)));
}

TEST(Int8Dot, UnavailablePathIsRefused) {
    for (Int8Isa isa : kIsas) {
        if (detail::int8_isa_available(isa)) continue;
        EXPECT_THROW(detail::force_int8_isa(isa), Error) << detail::int8_isa_name(isa);
    }
    EXPECT_TRUE(detail::int8_isa_available(Int8Isa::Scalar));
}

}  // namespace
}  // namespace kiln::ops::testing
