// int8 products of Q8_0 weights (ops/int8_dot.h) in linear and conv2d, on each ISA path this CPU has.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "harness.h"
#include "ops/cpu_q8_products.h"
#include "ops/im2col.h"
#include "ops/int8_dot.h"
#include "ops/ops.h"
#include "ops/tuning.h"

namespace kiln::ops::testing {
namespace {

using detail::Int8Isa;

struct ForcedIsa {
    explicit ForcedIsa(Int8Isa isa) : saved(detail::int8_isa()) { detail::force_int8_isa(isa); }
    ~ForcedIsa() { detail::force_int8_isa(saved); }
    Int8Isa saved;
};

// One output's float64 reference sum_k x_k w_k + bias and its bound. The int8 path computes sum_b fl(dx_b dw_b) D_b,
// D_b the exact integer dot of the codes, by fma in block order, then adds the bias. (1) Activations:
// dx = fl(amax / 127) <= (amax / 127)(1 + u), q = round(fl(x fl(1 / dx))) with fl(x fl(1 / dx)) = x / dx within
// 2.01u relative and |x / dx| <= 127 (1 + u): |q dx - x| <= dx (0.5 + 256u) =: e (a block under 1e-30 is zeros:
// e = amax); the weights are the dequantized values exactly. (2) Float: each term fl(dx dw) D_b is off by u
// relative; B fma additions and the bias add at most (B + 2) u more, of sum |terms| <= sum_k (|x_k| + e)|w_k| +
// |bias|: (B + 3) 1.01 u of that.
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

std::vector<Int8Isa> paths() {  // those this CPU has; the others are refused
    std::vector<Int8Isa> out;
    for (Int8Isa isa : {Int8Isa::Scalar, Int8Isa::Avx2, Int8Isa::Avx512Vnni}) {
        if (detail::int8_isa_available(isa)) out.push_back(isa);
        else EXPECT_THROW(detail::force_int8_isa(isa), Error);
    }
    return out;
}

// Within the bounds, and not the dequantized product's bits (else the int8 path did not run).
void expect_within(const Tensor& y, const Tensor& dequantized, const std::vector<Expected>& want, std::string what) {
    what += std::string(" ") + detail::int8_isa_name(detail::int8_isa());
    ASSERT_EQ(y.numel(), int64_t(want.size())) << what;
    double worst = 0;
    bool differs = false;
    for (size_t i = 0; i < want.size(); ++i) {
        const double err = std::fabs(double(y.data()[i]) - want[i].value);
        ASSERT_LE(err, want[i].bound) << what << ": output " << i << " " << y.data()[i] << " vs " << want[i].value;
        worst = std::max(worst, err / want[i].bound);
        differs = differs || y.data()[i] != dequantized.data()[i];
    }
    EXPECT_TRUE(differs) << what << ": the dequantized path's bits";
    std::printf("[ int8 ] %-34s worst error / bound %.3f\n", what.c_str(), worst);
}

bool same_bits(const Tensor& a, const Tensor& b) {
    return a.numel() == b.numel() && std::memcmp(a.data(), b.data(), size_t(a.numel()) * sizeof(float)) == 0;
}

// rows, in, out, bias: 1 row or output; rows past groups of 16 and blocks of 3 groups; outputs past blocks of 4
// rows; K of 1 to 64 blocks; 200 rows x 64 blocks: 3 panels of columns, the last one short.
constexpr int64_t kLinearShapes[][4] = {{1, 32, 1, 1},   {1, 64, 5, 0},   {3, 96, 4, 1},     {17, 160, 9, 1},
                                        {16, 32, 16, 0}, {50, 288, 13, 1}, {33, 1024, 7, 0}, {200, 2048, 6, 1}};

void check_linear(const int64_t (&s)[4], uint64_t seed) {
    const int64_t rows = s[0], in = s[1], out = s[2];
    const Tensor x = random_tensor({rows, in}, seed, -2.0f, 2.0f), b = random_tensor({out}, seed + 2);
    const Tensor wq = q8_weight({out, in}, seed + 1), w = wq.to_f32();
    const Tensor* bp = s[3] ? &b : nullptr;
    std::vector<Expected> want;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < out; ++o)
            want.push_back(expected_output(x.data() + r * in, 1, w.data() + o * in, in, bp ? b.data()[o] : 0.0f));
    expect_within(linear(x, wq, bp), linear(x, w, bp), want,
                  "linear " + std::to_string(rows) + "x" + std::to_string(in) + "->" + std::to_string(out));
}

// n, c, h, w, o, k, stride, padding, im2col budget: 3x3 padded (9 blocks a row), 1x1 (read in place), stride 2,
// im2col tiles of 10 pixels.
constexpr int64_t kConvShapes[][9] = {{2, 32, 7, 9, 5, 3, 1, 1, detail::kIm2colBudgetBytes},
                                      {1, 64, 5, 6, 3, 1, 1, 0, detail::kIm2colBudgetBytes},
                                      {1, 32, 9, 8, 7, 3, 2, 1, detail::kIm2colBudgetBytes},
                                      {1, 32, 6, 7, 6, 3, 1, 1, 32 * 9 * 4 * 10}};

void check_conv(const int64_t (&s)[9], uint64_t seed) {
    const int64_t n_img = s[0], c = s[1], h = s[2], wd = s[3], out = s[4], k = s[5];
    const int stride = int(s[6]), pad = int(s[7]);
    const Tensor x = random_tensor({n_img, c, h, wd}, seed, -2.0f, 2.0f), b = random_tensor({out}, seed + 2);
    const Tensor wq = q8_weight({out, c, k, k}, seed + 1), w = wq.to_f32();
    const Tensor y = detail::conv2d_tiled(x, wq, &b, stride, pad, s[8]);
    const int64_t pixels = y.dim(2) * y.dim(3), kk = c * k * k;
    const detail::ConvGeometry g{c, h, wd, k, k, stride, pad, y.dim(2), y.dim(3)};
    std::vector<Expected> want;
    std::vector<float> col(size_t(kk * pixels));  // each output pixel's inputs (im2col.h)
    for (int64_t n = 0; n < n_img; ++n) {
        detail::im2col_tile(x.data() + n * c * h * wd, g, 0, pixels, col.data());
        for (int64_t o = 0; o < out; ++o)
            for (int64_t p = 0; p < pixels; ++p)
                want.push_back(expected_output(col.data() + p, pixels, w.data() + o * kk, kk, b.data()[o]));
    }
    expect_within(y, detail::conv2d_tiled(x, w, &b, stride, pad, s[8]), want,
                  "conv2d c" + std::to_string(c) + " " + std::to_string(k) + "x" + std::to_string(k) + " s" +
                      std::to_string(stride));
}

TEST(Int8Dot, WithinTheRoundingBoundOnEveryPath) {
    for (Int8Isa isa : paths()) {
        ForcedIsa forced(isa);
        uint64_t seed = 500;
        for (const auto& s : kLinearShapes) check_linear(s, seed += 3);
        for (const auto& s : kConvShapes) check_conv(s, seed += 3);
    }
}

TEST(Int8Dot, PathsAgreeBitForBit) {
    const Tensor x = random_tensor({37, 320}, 701, -3.0f, 3.0f), wq = q8_weight({11, 320}, 702);
    const Tensor xc = random_tensor({1, 32, 9, 7}, 703), wc = q8_weight({6, 32, 3, 3}, 704), b = random_tensor({6}, 705);
    Tensor want_linear, want_conv;
    {
        ForcedIsa forced(Int8Isa::Scalar);
        want_linear = linear(x, wq, nullptr);
        want_conv = conv2d(xc, wc, &b, 1, 1);
    }
    for (Int8Isa isa : paths()) {
        ForcedIsa forced(isa);
        EXPECT_TRUE(same_bits(linear(x, wq, nullptr), want_linear)) << detail::int8_isa_name(isa);
        EXPECT_TRUE(same_bits(conv2d(xc, wc, &b, 1, 1), want_conv)) << detail::int8_isa_name(isa);
    }
}

// The fused convolutions make conv2d's columns of the materialised input (conv2d_impl.h): the same bits.
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

// A NaN or inf activation: the float path makes the outputs that read it NaN or +-inf, the int8 path NaN.
TEST(Int8Dot, NonFiniteActivationsGiveNonFiniteOutputsWhereTheFloatPathDoes) {
    const Tensor wq = q8_weight({9, 96}, 721), wc = q8_weight({5, 32, 3, 3}, 722);
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()})
        for (Int8Isa isa : paths()) {
            ForcedIsa forced(isa);
            Tensor x = random_tensor({19, 96}, 723), xc = random_tensor({1, 32, 6, 7}, 724);
            x.data()[5 * 96 + 40] = bad;
            xc.data()[(3 * 6 + 2) * 7 + 4] = bad;
            const Tensor ys[] = {linear(x, wq, nullptr), conv2d(xc, wc, nullptr, 1, 1)};
            const Tensor floats[] = {linear(x, wq.to_f32(), nullptr), conv2d(xc, wc.to_f32(), nullptr, 1, 1)};
            for (int op = 0; op < 2; ++op) {
                int64_t nan = 0;
                for (int64_t i = 0; i < ys[op].numel(); ++i) {
                    ASSERT_EQ(std::isfinite(ys[op].data()[i]), std::isfinite(floats[op].data()[i])) << op << " " << i;
                    nan += std::isnan(ys[op].data()[i]);
                }
                EXPECT_EQ(nan, op == 0 ? 9 : 5 * 9) << "linear: row 5's outputs; conv2d: the 3x3 window's";
            }
        }
}

TEST(Int8Dot, DequantizeSettingGivesTheFloatPath) {
    const Tensor x = random_tensor({2, 5, 64}, 731), w = q8_weight({31, 64}, 732), b = random_tensor({31}, 733);
    const Tensor xc = random_tensor({1, 32, 5, 6}, 734), wc = q8_weight({4, 32, 3, 3}, 735);
    const ScopedCpuQ8Products exact(CpuQ8Products::Dequantize);
    EXPECT_TRUE(same_bits(linear(x, w, &b), linear(x, w.to_f32(), &b)));
    EXPECT_TRUE(same_bits(conv2d(xc, wc, nullptr, 1, 1), conv2d(xc, wc.to_f32(), nullptr, 1, 1)));
}

}  // namespace
}  // namespace kiln::ops::testing
