// Checks against independent facts rather than the reference ops: exact identities, the accuracy of
// vec_math.h against libm in double, and the timestep embedding against exact math.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "harness.h"
#include "kiln/error.h"
#include "ops/ops.h"
#include "ops/tuning.h"
#include "ops/vec_math.h"

namespace kiln::ops::testing {
namespace {

TEST(VecMath, ExpWithinThreeUlpOverItsRange) {
    // Relative error against double exp on a dense sweep; 3u covers the Taylor truncation (< 0.2u),
    // the reduction x - n ln2 and the Horner steps (the claim in vec_math.h is "about 2 ulp").
    double worst = 0.0;
    for (double x = -86.0; x <= 88.7; x += 0.000731) {
        const float xf = static_cast<float>(x);
        const double exact = std::exp(static_cast<double>(xf));
        worst = std::max(worst, std::fabs(vec::exp(xf) - exact) / exact);
    }
    EXPECT_LT(worst, 3 * kU) << "worst relative error " << worst / kU << " u";
    std::printf("[ops] vec::exp worst relative error %.2f u\n", worst / kU);
}

TEST(VecMath, ExpSpecialValues) {
    EXPECT_EQ(vec::exp(0.0f), 1.0f);
    EXPECT_EQ(vec::exp(-INFINITY), 0.0f);
    EXPECT_EQ(vec::exp(-1000.0f), 0.0f);
    EXPECT_EQ(vec::exp(INFINITY), INFINITY);
    EXPECT_EQ(vec::exp(89.0f), INFINITY);  // e^89 > FLT_MAX
    EXPECT_TRUE(std::isfinite(vec::exp(88.7f)));
    EXPECT_TRUE(std::isnan(vec::exp(std::numeric_limits<float>::quiet_NaN())));
}

TEST(VecMath, ExpNonpositiveWithinThreeUlp) {
    double worst = 0.0;
    for (double x = -87.0; x <= 0.0; x += 0.000377) {
        const float xf = static_cast<float>(x);
        const double exact = std::exp(static_cast<double>(xf));
        worst = std::max(worst, std::fabs(vec::exp_nonpositive(xf) - exact) / exact);
    }
    EXPECT_LT(worst, 3 * kU) << "worst relative error " << worst / kU << " u";
    EXPECT_EQ(vec::exp_nonpositive(0.0f), 1.0f);
    EXPECT_EQ(vec::exp_nonpositive(-0.0f), 1.0f);
    EXPECT_EQ(vec::exp_nonpositive(-INFINITY), 0.0f);
    EXPECT_EQ(vec::exp_nonpositive(-90.0f), 0.0f);
    EXPECT_TRUE(std::isnan(vec::exp_nonpositive(std::numeric_limits<float>::quiet_NaN())));
}

TEST(VecMath, GeluAgainstErfWithinTheAbramowitzStegunBound) {
    // |gelu - exact| <= |x| (0.75e-7 + 8u) + 4u |y| (see ops_vs_reference_test.cpp).
    for (double x = -12.0; x <= 12.0; x += 0.0013) {
        const float xf = static_cast<float>(x);
        const double exact = 0.5 * xf * std::erfc(-xf / std::sqrt(2.0));
        EXPECT_LE(std::fabs(vec::gelu(xf) - exact), std::fabs(xf) * (0.75e-7 + 8 * kU) + 4 * kU * std::fabs(exact) + 1e-37)
            << "x = " << xf;
    }
}

TEST(ActivationFacts, FixedPoints) {
    Tensor x({4}, {0.0f, 30.0f, -30.0f, 1e-20f});
    Tensor s = x, g = x, gt = x, q = x;
    silu_(s);
    gelu_(g);
    gelu_tanh_(gt);
    quick_gelu_(q);
    for (const Tensor* t : {&s, &g, &gt, &q}) {
        EXPECT_EQ((*t)[0], 0.0f);
        EXPECT_EQ((*t)[1], 30.0f);             // the gate is 1 to float precision
        EXPECT_LE(std::fabs((*t)[2]), 3e-12);  // e.g. silu(-30) = -30 e^-30 / (1 + e^-30) = -2.8e-12
    }
    EXPECT_EQ(s[3], 0.5e-20f);  // silu(x) ~ x/2 near 0: sigmoid(0) = 1/2 exactly
}

TEST(ConvFacts, IdentityKernelsReturnTheInput) {
    const Tensor x = random_tensor({2, 3, 7, 5}, 7);
    Tensor w3({3, 3, 3, 3});  // out channel c copies in channel c through the kernel centre
    Tensor w1({3, 3, 1, 1});
    for (int c = 0; c < 3; ++c) {
        w3[((c * 3 + c) * 3 + 1) * 3 + 1] = 1.0f;
        w1[c * 3 + c] = 1.0f;
    }
    EXPECT_EQ(conv2d(x, w3, nullptr, 1, 1).values(), x.values());
    EXPECT_EQ(conv2d(x, w1, nullptr).values(), x.values());
    // Stride 2 with the same kernel samples every other pixel.
    const Tensor y = conv2d(x, w3, nullptr, 2, 1);
    ASSERT_EQ(y.shape(), (Shape{2, 3, 4, 3}));
    for (int64_t p = 0; p < 6; ++p)
        for (int64_t i = 0; i < 4; ++i)
            for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(y[(p * 4 + i) * 3 + j], x[(p * 7 + 2 * i) * 5 + 2 * j]);
}

TEST(AttentionFacts, EqualScoresAverageTheValues) {
    // k = 0 makes every score 0, so each query gets the plain mean of v over the keys.
    const int64_t lk = 37;
    const Tensor q = random_tensor({1, 5, 8}, 1);
    const Tensor v = random_tensor({1, lk, 8}, 2);
    const Tensor out = attention(q, Tensor({1, lk, 8}), v, 2);
    for (int64_t i = 0; i < 5; ++i)
        for (int64_t c = 0; c < 8; ++c) {
            double mean = 0.0;
            for (int64_t j = 0; j < lk; ++j) mean += v[j * 8 + c];
            mean /= lk;
            // Each weight is exactly 1 (e^0), so only the float sum of lk values and the division round.
            EXPECT_NEAR(out[i * 8 + c], mean, (lk + 2) * kU * 1.0);
        }
}

TEST(AttentionFacts, ProjectionsSideBySideAreTheirParts) {
    const Tensor q = random_tensor({2, 5, 12}, 31), k = random_tensor({2, 5, 12}, 32), v = random_tensor({2, 5, 12}, 33);
    Tensor qkv({2, 5, 36}), kv({2, 5, 24});
    for (int64_t row = 0; row < 10; ++row)
        for (int64_t j = 0; j < 12; ++j) {
            qkv[row * 36 + j] = q[row * 12 + j];
            qkv[row * 36 + 12 + j] = kv[row * 24 + j] = k[row * 12 + j];
            qkv[row * 36 + 24 + j] = kv[row * 24 + 12 + j] = v[row * 12 + j];
        }
    EXPECT_EQ(columns(qkv, 12, 12).values(), k.values());
    EXPECT_EQ(columns(qkv, 24, 12).values(), v.values());
    const Tensor ref = attention(q, k, v, 3);
    EXPECT_EQ(attention_qkv(qkv, 3).values(), ref.values());
    EXPECT_EQ(attention_kv(q, kv, 3).values(), ref.values());
    // k | v at a column of a wider product's output (several attentions' k | v side by side).
    Tensor wide({2, 5, 60});
    for (int64_t row = 0; row < 10; ++row)
        for (int64_t j = 0; j < 60; ++j) wide[row * 60 + j] = j >= 24 && j < 48 ? kv[row * 24 + j - 24] : 7.0f;
    EXPECT_EQ(attention_kv(q, wide, 3, 24).values(), ref.values());
}

TEST(AttentionFacts, CausalFirstQuerySeesOnlyTheFirstKey) {
    const Tensor q = random_tensor({2, 6, 16}, 3), k = random_tensor({2, 6, 16}, 4), v = random_tensor({2, 6, 16}, 5);
    const Tensor out = attention(q, k, v, 4, true);
    for (int64_t b = 0; b < 2; ++b)
        for (int64_t c = 0; c < 16; ++c) EXPECT_EQ(out[b * 6 * 16 + c], v[b * 6 * 16 + c]);
}

TEST(NormFacts, ConstantRowsGiveBeta) {
    const Tensor x = Tensor::filled({2, 3, 16}, 4.25f);
    const Tensor gamma = random_tensor({16}, 8), beta = random_tensor({16}, 9);
    const Tensor y = layer_norm(x, gamma, beta, 1e-5f);
    for (int64_t i = 0; i < y.numel(); ++i) EXPECT_EQ(y[i], beta[i % 16]);
}

TEST(TimestepEmbeddingFacts, MatchesExactMathWithinFloat32Steps) {
    // diffusers rounds exponent, frequency and argument to float32; each relative error <= u, and the
    // exponent's grows with |exponent| <= ln(max_period), so the argument is off by at most
    // |arg| (2 ln(max_period) + 4) u, which sin and cos pass on with slope <= 1.
    const std::vector<float> t = {0.0f, 1.0f, 261.5f, 999.0f};
    for (bool flip : {false, true})
        for (float shift : {0.0f, 1.0f}) {
            const int dim = 320, half = dim / 2;
            const Tensor e = timestep_embedding(t, dim, flip, shift);
            ASSERT_EQ(e.shape(), (Shape{4, dim}));
            for (size_t r = 0; r < t.size(); ++r)
                for (int i = 0; i < half; ++i) {
                    const double arg = t[r] * std::exp(-std::log(10000.0) * i / (half - shift));
                    const double tol = kU * (std::fabs(arg) * (2 * std::log(10000.0) + 4) + 2);
                    const int sin_at = flip ? half + i : i, cos_at = flip ? i : half + i;
                    EXPECT_NEAR(e[r * dim + sin_at], std::sin(arg), tol) << "t " << t[r] << " i " << i;
                    EXPECT_NEAR(e[r * dim + cos_at], std::cos(arg), tol) << "t " << t[r] << " i " << i;
                }
            for (int i = 0; i < half; ++i) {  // t = 0: sin 0 = 0 and cos 0 = 1 exactly
                EXPECT_EQ(e[(flip ? half : 0) + i], 0.0f);
                EXPECT_EQ(e[(flip ? 0 : half) + i], 1.0f);
            }
        }
    const Tensor odd = timestep_embedding({5.0f}, 9, false, 1.0f);
    EXPECT_EQ(odd[8], 0.0f);  // odd dims get a zero column at the end
    EXPECT_EQ(odd[0], static_cast<float>(std::sin(5.0)));  // i = 0: frequency exactly 1
}

TEST(LayoutFacts, UpsampleRepeatsEachPixel) {
    const Tensor x({1, 1, 2, 2}, {1.0f, 2.0f, 3.0f, 4.0f});
    const Tensor y = upsample_nearest2x(x);
    EXPECT_EQ(y.values(), (std::vector<float>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}));
}

TEST(LayoutFacts, NlcRoundTrip) {
    const Tensor x = random_tensor({2, 5, 3, 7}, 10);
    EXPECT_EQ(nlc_to_nchw(nchw_to_nlc(x), 3, 7).values(), x.values());
    EXPECT_EQ(nchw_to_nlc(x).shape(), (Shape{2, 21, 5}));
}

TEST(LayoutFacts, ConvPlusImageBiasIsItsComposition) {
    const Tensor x = random_tensor({2, 4, 5, 3}, 21), w = random_tensor({6, 4, 3, 3}, 22), b = random_tensor({6}, 23);
    const Tensor gamma = random_tensor({4}, 24), beta = random_tensor({4}, 25), image_bias = random_tensor({2, 6}, 26);
    Tensor composed = conv2d_group_norm_silu(x, 2, gamma, beta, 1e-5f, w, &b, 1, 1);
    add_channel_bias_(composed, image_bias);
    EXPECT_EQ(conv2d_group_norm_silu_plus(x, 2, gamma, beta, 1e-5f, w, &b, image_bias, 0, 1, 1).values(),
              composed.values());
    // A block's columns of the UNet's stacked time projections: [2, 11], this block's 6 from column 3.
    const Tensor wide = random_tensor({2, 11}, 27);
    Tensor composed_wide = conv2d_group_norm_silu(x, 2, gamma, beta, 1e-5f, w, &b, 1, 1);
    add_channel_bias_(composed_wide, columns(wide, 3, 6));
    EXPECT_EQ(conv2d_group_norm_silu_plus(x, 2, gamma, beta, 1e-5f, w, &b, wide, 3, 1, 1).values(),
              composed_wide.values());
    for (int64_t at : {-1, 6}) {
        try {
            conv2d_group_norm_silu_plus(x, 2, gamma, beta, 1e-5f, w, &b, wide, at, 1, 1);
            ADD_FAILURE() << "column " << at << " of 11 for 6 channels";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
            EXPECT_NE(std::string(e.what()).find("has no columns"), std::string::npos) << e.what();
        }
    }
}

// GroupNorm's statistics gathered elsewhere (the tiled VAE decode): with group_norm's own scale and shift,
// conv2d_affine_silu is conv2d_group_norm_silu bit for bit, and statistics summed in two parts give them.
TEST(LayoutFacts, AffineSiluConvWithGroupNormsScaleAndShiftIsTheFusedNorm) {
    const Tensor x = random_tensor({1, 4, 6, 5}, 31), w = random_tensor({3, 4, 3, 3}, 32), b = random_tensor({3}, 33);
    const Tensor gamma = random_tensor({4}, 34), beta = random_tensor({4}, 35);
    std::vector<double> sum(4, 0.0), sum_sq(4, 0.0);
    // Rows 0-1 then 2-5 of each channel's 6 x 5 plane.
    detail::add_plane_sums(x.data(), 4, 30, 10, sum.data(), sum_sq.data());
    detail::add_plane_sums(x.data() + 10, 4, 30, 20, sum.data(), sum_sq.data());
    std::vector<float> scale, shift, whole_scale, whole_shift;
    detail::group_norm_scale_shift(sum, sum_sq, 30, 1, 4, 2, gamma, beta, 1e-5f, scale, shift);
    detail::group_norm_affine(x, 2, gamma, beta, 1e-5f, whole_scale, whole_shift);
    for (size_t c = 0; c < 4; ++c) {  // the same doubles summed in another order: within a float's rounding
        EXPECT_NEAR(scale[c], whole_scale[c], 1e-6 * std::fabs(whole_scale[c])) << c;
        EXPECT_NEAR(shift[c], whole_shift[c], 1e-6 * std::fabs(whole_shift[c]) + 1e-7) << c;
    }
    EXPECT_EQ(conv2d_affine_silu(x, whole_scale, whole_shift, w, &b, 1, 1).values(),
              conv2d_group_norm_silu(x, 2, gamma, beta, 1e-5f, w, &b, 1, 1).values());
    try {
        conv2d_affine_silu(x, {1, 2, 3}, whole_shift, w, &b, 1, 1);
        ADD_FAILURE() << "3 scales for 4 channels";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
        EXPECT_NE(std::string(e.what()).find("one a channel"), std::string::npos) << e.what();
    }
}

TEST(LayoutFacts, TransformerWayInAndOutAreTheirCompositions) {
    const Tensor x = random_tensor({2, 4, 3, 5}, 11), gamma = random_tensor({4}, 12), beta = random_tensor({4}, 13);
    EXPECT_EQ(group_norm_to_nlc(x, 2, gamma, beta, 1e-6f).values(),
              nchw_to_nlc(group_norm(x, 2, gamma, beta, 1e-6f)).values());
    const Tensor tokens = random_tensor({2, 15, 4}, 14);
    Tensor y = x, composed = x;
    add_nlc_(y, tokens);
    add_(composed, nlc_to_nchw(tokens, 3, 5));
    EXPECT_EQ(y.values(), composed.values());
}

}  // namespace
}  // namespace kiln::ops::testing
