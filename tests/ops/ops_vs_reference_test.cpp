// The cross-op harness: every op in KILN_OP_LIST against its reference (src/ops/ref/) on shapes chosen
// to break things: 1, 31, 32, 33, odd spatial sizes, batches of one, 3x3 stride 2 padding 1 on odd
// sizes, im2col in several tiles, attention in several blocks with Lq != Lk, causal, 1 and 8 heads.
//
// Each case compares elementwise against a bound derived from float32 arithmetic (u = 2^-24):
//  - a sum of n products computed in float in any order (sgemm, with or without FMA) is within
//    gamma_n * sum |a_i b_i|, gamma_n = n u / (1 - n u) (Higham, Accuracy and Stability of Numerical
//    Algorithms, 2nd ed., section 3.1); we use (n + 2) u, which also covers the reference's own final
//    rounding to float. sum |a_i b_i| is the reference op run on |inputs|.
//  - transcendental functions (vec_math.h) are within a few u relative, plus the Abramowitz-Stegun erf
//    approximation's 1.5e-7 absolute for gelu; each bound below says how it adds up.
//  - pure data movement must be exact (bound 0).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "common/random_blocks.h"
#include "harness.h"
#include "ops/cpu_q8_products.h"
#include "ops/ops.h"
#include "ops/ref/ref_ops.h"
#include "ops/tuning.h"

namespace kiln::ops::testing {
namespace {

struct OpCase {
    std::string name;
    std::function<Check()> run;
};
using CaseList = std::vector<OpCase>;

// Results below float's normal range (~1.2e-38) may flush to 0 or come out as a tiny normal number.
constexpr double kUnderflow = 1e-37;

template <class F>
Tensor map_values(const Tensor& t, F f) {
    Tensor out(t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) out[i] = static_cast<float>(f(static_cast<double>(t[i]), i));
    return out;
}

Tensor scaled(const Tensor& t, double factor) {
    return map_values(t, [factor](double v, int64_t) { return v * factor; });
}

// Weights of `wtype`: random floats quantized to it, or for q2_K and q3_K random blocks (every code and sub-scale).
Tensor weights(const Shape& shape, uint64_t seed, DType wtype) {
    if (wtype == DType::Q2_K || wtype == DType::Q3_K) return kiln::test::random_low_bit_blocks(shape, uint32_t(seed), wtype);
    return random_tensor(shape, seed).converted(wtype);
}

// ---------------------------------------------------------------------------------------------- linear
// F16/BF16 weights: the op converts tiles of weight rows (weight_budget bytes of float32 at a time);
// the reference gets the same values as float32 (exact), so the float32 bound applies unchanged.
Check linear_check(const Shape& x_shape, int64_t out, bool with_bias, uint64_t seed, DType wtype = DType::F32,
                   int64_t weight_budget = detail::kWeightTileBudgetBytes) {
    const ScopedCpuQ8Products exact(CpuQ8Products::Dequantize);
    const Tensor x = random_tensor(x_shape, seed);
    const Tensor wq = weights({out, x_shape.back()}, seed + 1, wtype);
    const Tensor w = wq.to_f32();
    const Tensor b = random_tensor({out}, seed + 2);
    const Tensor* bp = with_bias ? &b : nullptr;
    Check c{detail::linear_tiled(x, wq, bp, weight_budget), ref::linear(x, w, bp), {}};
    const Tensor ab = abs_of(b);
    const double n = static_cast<double>(x_shape.back()) + 1;  // in products and the bias
    c.bound = scaled(ref::linear(abs_of(x), abs_of(w), with_bias ? &ab : nullptr), (n + 2) * kU);
    return c;
}

CaseList cases_linear() {
    return {
        {"1x1_bias", [] { return linear_check({1, 1}, 1, true, 11); }},
        {"vector_31_to_33", [] { return linear_check({31}, 33, false, 12); }},
        {"b2_l33_32_to_31_bias", [] { return linear_check({2, 33, 32}, 31, true, 13); }},
        {"b3_l1_65_to_64_bias", [] { return linear_check({3, 1, 65}, 64, true, 14); }},
        {"clip_like_2x77x96_to_288", [] { return linear_check({2, 77, 96}, 288, true, 15); }},
        {"zero_in_features_gives_bias", [] { return linear_check({2, 0}, 3, true, 16); }},
        {"zero_rows", [] { return linear_check({0, 5}, 4, true, 17); }},
        {"f16_weight_one_tile", [] { return linear_check({2, 33, 32}, 31, true, 18, DType::F16); }},
        {"bf16_weight_one_tile", [] { return linear_check({3, 65}, 64, false, 19, DType::BF16); }},
        // 3 rows of 32 floats per tile: 31 outputs in 11 tiles, the last one short.
        {"f16_weight_tiles_of_3_rows", [] { return linear_check({2, 5, 32}, 31, true, 20, DType::F16, 3 * 32 * 4); }},
        {"bf16_weight_tiles_of_1_row", [] { return linear_check({7, 33}, 5, true, 41, DType::BF16, 1); }},
        {"f16_weight_zero_rows", [] { return linear_check({0, 5}, 4, true, 42, DType::F16, 1); }},
        // Block-format weights (rows of whole 32-value blocks) are dequantized tile by tile like F16 (Q8_0 under
        // KILN_CPU_Q8=dequantize): the reference gets the dequantized values, so the float32 bound applies.
        {"q8_0_weight_one_tile", [] { return linear_check({2, 33, 64}, 31, true, 81, DType::Q8_0); }},
        {"q4_0_weight_tiles_of_3_rows", [] { return linear_check({2, 5, 32}, 31, true, 82, DType::Q4_0, 3 * 32 * 4); }},
        {"q4_1_weight_tiles_of_1_row", [] { return linear_check({7, 96}, 5, true, 83, DType::Q4_1, 1); }},
        {"q5_0_weight_one_tile", [] { return linear_check({3, 64}, 9, true, 90, DType::Q5_0); }},
        {"q5_1_weight_tiles_of_2_rows", [] { return linear_check({2, 3, 96}, 7, false, 91, DType::Q5_1, 2 * 96 * 4); }},
        // k-quants: rows of whole 256-value blocks.
        {"q4_k_weight_tiles_of_1_row", [] { return linear_check({3, 256}, 5, true, 92, DType::Q4_K, 1); }},
        {"q5_k_weight_one_tile", [] { return linear_check({2, 5, 512}, 3, true, 93, DType::Q5_K); }},
        {"q6_k_weight_tiles_of_3_rows", [] { return linear_check({4, 256}, 7, true, 94, DType::Q6_K, 3 * 256 * 4); }},
        // q2_K, q3_K: random blocks (tests/common/random_blocks.h)
        {"q2_k_weight_tiles_of_2_rows", [] { return linear_check({3, 512}, 5, true, 95, DType::Q2_K, 2 * 512 * 4); }},
        {"q3_k_weight_one_tile", [] { return linear_check({2, 3, 256}, 9, false, 97, DType::Q3_K); }},
    };
}

// ---------------------------------------------------------------------------------------------- conv2d
struct ConvShape {
    int64_t n, c, h, w, o, kh, kw;
    int stride, padding;
};

Check conv_check(const ConvShape& s, bool with_bias, int64_t budget_bytes, uint64_t seed, DType wtype = DType::F32,
                 int64_t weight_budget = detail::kWeightTileBudgetBytes) {
    const ScopedCpuQ8Products exact(CpuQ8Products::Dequantize);
    const Tensor x = random_tensor({s.n, s.c, s.h, s.w}, seed);
    const Tensor wq = weights({s.o, s.c, s.kh, s.kw}, seed + 1, wtype);
    const Tensor w = wq.to_f32();
    const Tensor b = random_tensor({s.o}, seed + 2);
    const Tensor* bp = with_bias ? &b : nullptr;
    Check c{detail::conv2d_tiled(x, wq, bp, s.stride, s.padding, budget_bytes, weight_budget),
            ref::conv2d(x, w, bp, s.stride, s.padding), {}};
    const Tensor ab = abs_of(b);
    const double n = static_cast<double>(s.c * s.kh * s.kw) + 1;
    c.bound = scaled(ref::conv2d(abs_of(x), abs_of(w), with_bias ? &ab : nullptr, s.stride, s.padding), (n + 2) * kU);
    return c;
}

// The fused GroupNorm+SiLU input must give exactly what conv2d of the materialised silu(group_norm(x))
// gives: the same float operations per element, the same columns, the same sgemm calls (bound 0). The
// unfused composition is itself checked against the references above.
Check fused_norm_conv_check(const ConvShape& s, int groups, int64_t budget_bytes, uint64_t seed,
                            DType wtype = DType::F32) {
    const ScopedCpuQ8Products exact(CpuQ8Products::Dequantize);
    const Tensor x = scaled(random_tensor({s.n, s.c, s.h, s.w}, seed), 3.0);
    const Tensor gamma = random_tensor({s.c}, seed + 3, 0.5f, 1.5f), beta = random_tensor({s.c}, seed + 4);
    const Tensor w = random_tensor({s.o, s.c, s.kh, s.kw}, seed + 1).converted(wtype);
    const Tensor b = random_tensor({s.o}, seed + 2);
    Tensor normed = group_norm(x, groups, gamma, beta, 1e-6f);
    silu_(normed);
    Check c{detail::conv2d_group_norm_silu_tiled(x, groups, gamma, beta, 1e-6f, w, &b, s.stride, s.padding, budget_bytes),
            detail::conv2d_tiled(normed, w, &b, s.stride, s.padding, budget_bytes), {}};
    c.bound = Tensor(c.expected.shape());
    return c;
}

// The output modes of the fused GroupNorm+SiLU conv (conv2d_inplace.cpp) must give exactly the values of
// conv2d_group_norm_silu with the same budgets (bound 0): added onto y as add_ adds, or written over x.
Check norm_conv_add_check(const ConvShape& s, int groups, int64_t budget_bytes, uint64_t seed,
                          DType wtype = DType::F32, int64_t weight_budget = detail::kWeightTileBudgetBytes) {
    const Tensor x = scaled(random_tensor({s.n, s.c, s.h, s.w}, seed), 3.0);
    const Tensor gamma = random_tensor({s.c}, seed + 3, 0.5f, 1.5f), beta = random_tensor({s.c}, seed + 4);
    const Tensor w = random_tensor({s.o, s.c, s.kh, s.kw}, seed + 1).converted(wtype);
    const Tensor b = random_tensor({s.o}, seed + 2);
    Tensor expected = detail::conv2d_group_norm_silu_tiled(x, groups, gamma, beta, 1e-6f, w, &b, s.stride, s.padding,
                                                           budget_bytes, weight_budget);
    const Tensor y0 = random_tensor(expected.shape(), seed + 5);
    add_(expected, y0);
    Tensor actual = y0;
    detail::conv2d_group_norm_silu_add_tiled(actual, x, groups, gamma, beta, 1e-6f, w, &b, s.stride, s.padding,
                                             budget_bytes, weight_budget);
    Check c{std::move(actual), std::move(expected), {}};
    c.bound = Tensor(c.expected.shape());
    return c;
}

Check norm_conv_inplace_check(const ConvShape& s, int groups, int64_t budget_bytes, uint64_t seed,
                              DType wtype = DType::F32, int64_t weight_budget = detail::kWeightTileBudgetBytes) {
    const Tensor x = scaled(random_tensor({s.n, s.c, s.h, s.w}, seed), 3.0);
    const Tensor gamma = random_tensor({s.c}, seed + 3, 0.5f, 1.5f), beta = random_tensor({s.c}, seed + 4);
    const Tensor w = random_tensor({s.o, s.c, s.kh, s.kw}, seed + 1).converted(wtype);
    const Tensor b = random_tensor({s.o}, seed + 2);
    Check c{detail::conv2d_group_norm_silu_inplace_tiled(Tensor(x), groups, gamma, beta, 1e-6f, w, &b, s.stride,
                                                         s.padding, budget_bytes, weight_budget),
            detail::conv2d_group_norm_silu_tiled(x, groups, gamma, beta, 1e-6f, w, &b, s.stride, s.padding,
                                                 budget_bytes, weight_budget),
            {}};
    c.bound = Tensor(c.expected.shape());
    return c;
}

// The fused nearest-2x upsampling must give exactly what conv2d of the materialised upsample_nearest2x(x)
// gives with the same budgets: the same columns, so the same sgemm calls (bound 0). The composition is
// itself checked against the references (conv2d above, upsample_nearest2x below). s describes x before
// upsampling.
Check fused_upsample_conv_check(const ConvShape& s, int64_t budget_bytes, uint64_t seed, DType wtype = DType::F32,
                                int64_t weight_budget = detail::kWeightTileBudgetBytes) {
    const ScopedCpuQ8Products exact(CpuQ8Products::Dequantize);
    const Tensor x = random_tensor({s.n, s.c, s.h, s.w}, seed);
    const Tensor w = random_tensor({s.o, s.c, s.kh, s.kw}, seed + 1).converted(wtype);
    const Tensor b = random_tensor({s.o}, seed + 2);
    Check c{detail::conv2d_upsample2x_tiled(x, w, &b, s.stride, s.padding, budget_bytes, weight_budget),
            detail::conv2d_tiled(upsample_nearest2x(x), w, &b, s.stride, s.padding, budget_bytes, weight_budget), {}};
    c.bound = Tensor(c.expected.shape());
    return c;
}

CaseList cases_conv2d() {
    constexpr int64_t kDefault = detail::kIm2colBudgetBytes;
    return {
        {"1x1_gemm_path_b2_c33_7x9_to_31", [] { return conv_check({2, 33, 7, 9, 31, 1, 1, 1, 0}, true, kDefault, 21); }},
        {"1x1_single_pixel_no_bias", [] { return conv_check({1, 32, 1, 1, 1, 1, 1, 1, 0}, false, kDefault, 22); }},
        {"3x3_s1_p1_odd_17x13", [] { return conv_check({2, 3, 17, 13, 33, 3, 3, 1, 1}, true, kDefault, 23); }},
        {"3x3_s2_p1_odd_15x9", [] { return conv_check({1, 31, 15, 9, 32, 3, 3, 2, 1}, true, kDefault, 24); }},
        {"3x3_s2_p1_even_16x16", [] { return conv_check({2, 8, 16, 16, 8, 3, 3, 2, 1}, true, kDefault, 25); }},
        {"3x3_s2_p1_1x1_input", [] { return conv_check({1, 4, 1, 1, 5, 3, 3, 2, 1}, true, kDefault, 26); }},
        {"3x3_s1_p0_to_1x1", [] { return conv_check({1, 5, 3, 3, 7, 3, 3, 1, 0}, false, kDefault, 27); }},
        {"1x1_s2_generic_path", [] { return conv_check({1, 6, 9, 7, 5, 1, 1, 2, 0}, true, kDefault, 28); }},
        {"5x3_kernel_s2_p1", [] { return conv_check({1, 2, 9, 8, 3, 5, 3, 2, 1}, true, kDefault, 29); }},
        {"3x3_s1_p2_wider_than_input", [] { return conv_check({1, 2, 2, 3, 3, 3, 3, 1, 2}, true, kDefault, 30); }},
        // A budget of 7 columns: tiles of 7 output pixels that straddle output rows.
        {"tiled_7_columns_3x3_s1_p1_11x9",
         [] { return conv_check({2, 3, 11, 9, 4, 3, 3, 1, 1}, true, 3 * 9 * 7 * 4, 31); }},
        {"tiled_5_columns_3x3_s2_p1_13x7",
         [] { return conv_check({1, 33, 13, 7, 31, 3, 3, 2, 1}, true, 33 * 9 * 5 * 4, 32); }},
        {"tiled_1_column", [] { return conv_check({1, 2, 5, 5, 3, 3, 3, 1, 1}, false, 1, 33); }},
        {"zero_in_channels_gives_bias", [] { return conv_check({2, 0, 5, 4, 3, 3, 3, 1, 1}, true, kDefault, 34); }},
        {"zero_in_channels_1x1", [] { return conv_check({1, 0, 3, 3, 2, 1, 1, 1, 0}, true, kDefault, 35); }},
        {"empty_batch", [] { return conv_check({0, 3, 5, 5, 2, 3, 3, 1, 1}, true, kDefault, 36); }},
        {"f16_weight_3x3_s1_p1_odd", [] { return conv_check({2, 3, 17, 13, 33, 3, 3, 1, 1}, true, kDefault, 37, DType::F16); }},
        {"bf16_weight_1x1_gemm_path", [] { return conv_check({2, 33, 7, 9, 31, 1, 1, 1, 0}, true, kDefault, 38, DType::BF16); }},
        // Weight tiles of 2 output channels (33*9 floats each) around im2col tiles of 5 columns.
        {"f16_weight_tiles_of_2_channels_and_5_columns",
         [] { return conv_check({2, 33, 13, 7, 31, 3, 3, 2, 1}, true, 33 * 9 * 5 * 4, 39, DType::F16, 2 * 33 * 9 * 4); }},
        {"norm_silu_3x3_s1_p1_odd_b2_c32_g8", [] { return fused_norm_conv_check({2, 32, 11, 7, 9, 3, 3, 1, 1}, 8, kDefault, 43); }},
        {"norm_silu_3x3_s2_p1_tiled_5_columns",
         [] { return fused_norm_conv_check({1, 6, 13, 7, 5, 3, 3, 2, 1}, 3, 6 * 9 * 5 * 4, 44); }},
        {"norm_silu_1x1_goes_through_im2col", [] { return fused_norm_conv_check({2, 4, 5, 3, 7, 1, 1, 1, 0}, 2, kDefault, 45); }},
        {"norm_silu_f16_weight_one_group", [] { return fused_norm_conv_check({1, 5, 4, 4, 3, 3, 3, 1, 1}, 1, kDefault, 46, DType::F16); }},
        {"q8_0_weight_3x3_s1_p1_odd", [] { return conv_check({2, 32, 9, 7, 33, 3, 3, 1, 1}, true, kDefault, 84, DType::Q8_0); }},
        {"q4_0_weight_1x1_gemm_path", [] { return conv_check({2, 64, 7, 9, 31, 1, 1, 1, 0}, true, kDefault, 85, DType::Q4_0); }},
        {"q4_1_weight_tiles_of_2_channels_and_5_columns",
         [] { return conv_check({2, 32, 13, 7, 31, 3, 3, 2, 1}, true, 32 * 9 * 5 * 4, 86, DType::Q4_1, 2 * 32 * 9 * 4); }},
        // A k-quant 3x3 filter: 256 input channels x 9 taps = 9 blocks a row.
        {"q4_k_weight_3x3_tiles_of_2_channels",
         [] { return conv_check({1, 256, 5, 4, 5, 3, 3, 1, 1}, true, kDefault, 95, DType::Q4_K, 2 * 256 * 9 * 4); }},
        {"q6_k_weight_1x1", [] { return conv_check({2, 256, 3, 5, 4, 1, 1, 1, 0}, false, kDefault, 96, DType::Q6_K); }},
        {"q3_k_weight_1x1", [] { return conv_check({1, 256, 4, 3, 5, 1, 1, 1, 0}, true, kDefault, 98, DType::Q3_K); }},
        {"q2_k_weight_1x1", [] { return conv_check({2, 512, 3, 3, 3, 1, 1, 1, 0}, false, kDefault, 99, DType::Q2_K); }},
        {"norm_silu_q8_0_weight", [] { return fused_norm_conv_check({1, 32, 6, 5, 7, 3, 3, 1, 1}, 8, kDefault, 87, DType::Q8_0); }},
        {"bf16_weight_tiles_of_1_channel_1x1", [] { return conv_check({1, 6, 5, 4, 3, 1, 1, 1, 0}, false, kDefault, 40, DType::BF16, 1); }},
        // Upsampled inputs: odd sizes (odd upsampled columns start and end rows of taps), one pixel, no and
        // wide padding, stride 2 (even and odd offsets), a non-square kernel, and tiles that start mid-row.
        {"upsample_3x3_s1_p1_odd_b2_5x7", [] { return fused_upsample_conv_check({2, 3, 5, 7, 33, 3, 3, 1, 1}, kDefault, 47); }},
        {"upsample_3x3_s1_p1_1x1_input", [] { return fused_upsample_conv_check({1, 4, 1, 1, 5, 3, 3, 1, 1}, kDefault, 48); }},
        {"upsample_3x3_s1_p0", [] { return fused_upsample_conv_check({1, 5, 3, 4, 7, 3, 3, 1, 0}, kDefault, 49); }},
        {"upsample_3x3_s1_p2_wider_than_input", [] { return fused_upsample_conv_check({1, 2, 1, 2, 3, 3, 3, 1, 2}, kDefault, 50); }},
        {"upsample_3x3_s2_p1_odd_7x5", [] { return fused_upsample_conv_check({1, 31, 7, 5, 32, 3, 3, 2, 1}, kDefault, 51); }},
        {"upsample_5x3_kernel_s2_p1", [] { return fused_upsample_conv_check({2, 2, 5, 4, 3, 5, 3, 2, 1}, kDefault, 52); }},
        {"upsample_1x1_goes_through_im2col", [] { return fused_upsample_conv_check({2, 33, 3, 5, 31, 1, 1, 1, 0}, kDefault, 53); }},
        // Tiles of 7, 1 and 5 output pixels: tiles that start at odd upsampled columns or straddle rows.
        {"upsample_tiled_7_columns_3x3_s1_p1_5x7",
         [] { return fused_upsample_conv_check({1, 3, 5, 7, 4, 3, 3, 1, 1}, 3 * 9 * 7 * 4, 54); }},
        {"upsample_tiled_1_column", [] { return fused_upsample_conv_check({1, 2, 3, 3, 3, 3, 3, 1, 1}, 1, 55); }},
        {"upsample_f16_weight_tiles_of_2_channels_and_5_columns",
         [] { return fused_upsample_conv_check({2, 33, 4, 3, 31, 3, 3, 1, 1}, 33 * 9 * 5 * 4, 56, DType::F16, 2 * 33 * 9 * 4); }},
        {"upsample_bf16_weight_s2", [] { return fused_upsample_conv_check({1, 6, 5, 5, 3, 3, 3, 2, 1}, kDefault, 57, DType::BF16); }},
        {"upsample_empty_batch", [] { return fused_upsample_conv_check({0, 3, 2, 2, 2, 3, 3, 1, 1}, kDefault, 58); }},
        // Added onto y: two images, stride 2 in tiles of 5 pixels, weight tiles of 2 channels, a 1x1 kernel.
        {"norm_silu_add_3x3_s1_p1_b2_odd", [] { return norm_conv_add_check({2, 8, 11, 7, 6, 3, 3, 1, 1}, 4, kDefault, 59); }},
        {"norm_silu_add_s2_tiled_5_columns",
         [] { return norm_conv_add_check({1, 6, 13, 7, 5, 3, 3, 2, 1}, 3, 6 * 9 * 5 * 4, 60); }},
        {"norm_silu_add_f16_weight_tiles_of_2_channels",
         [] { return norm_conv_add_check({2, 12, 5, 4, 7, 3, 3, 1, 1}, 4, 12 * 9 * 5 * 4, 61, DType::F16, 2 * 12 * 9 * 4); }},
        {"norm_silu_add_1x1", [] { return norm_conv_add_check({1, 4, 5, 3, 6, 1, 1, 1, 0}, 2, kDefault, 62); }},
        {"norm_silu_add_q4_0_weight_tiles_of_2_channels",
         [] { return norm_conv_add_check({2, 32, 5, 4, 7, 3, 3, 1, 1}, 4, 32 * 9 * 5 * 4, 88, DType::Q4_0, 2 * 32 * 9 * 4); }},
        // Over the input: one tile; tiles shorter than a row (outputs wait several tiles); one-pixel tiles;
        // a 5x5 kernel (two rows of padding); 1x1; one-row and one-pixel images; F16 weights; as many
        // output channels as input ones.
        {"norm_silu_inplace_3x3_c6_to_4_11x7", [] { return norm_conv_inplace_check({1, 6, 11, 7, 4, 3, 3, 1, 1}, 3, kDefault, 63); }},
        {"norm_silu_inplace_tiled_5_columns",
         [] { return norm_conv_inplace_check({1, 6, 11, 7, 4, 3, 3, 1, 1}, 3, 6 * 9 * 5 * 4, 64); }},
        {"norm_silu_inplace_tiled_1_column_c4_to_4",
         [] { return norm_conv_inplace_check({1, 4, 5, 6, 4, 3, 3, 1, 1}, 2, 1, 65); }},
        {"norm_silu_inplace_5x5_p2_tiled_9_columns",
         [] { return norm_conv_inplace_check({1, 8, 9, 10, 5, 5, 5, 1, 2}, 4, 8 * 25 * 9 * 4, 66); }},
        {"norm_silu_inplace_1x1_tiled_7_columns",
         [] { return norm_conv_inplace_check({1, 6, 4, 5, 3, 1, 1, 1, 0}, 3, 6 * 7 * 4, 67); }},
        {"norm_silu_inplace_one_row", [] { return norm_conv_inplace_check({1, 4, 1, 9, 4, 3, 3, 1, 1}, 2, 4 * 9 * 2 * 4, 68); }},
        {"norm_silu_inplace_one_pixel", [] { return norm_conv_inplace_check({1, 4, 1, 1, 2, 3, 3, 1, 1}, 1, kDefault, 69); }},
        {"norm_silu_inplace_f16_weight",
         [] { return norm_conv_inplace_check({1, 12, 7, 6, 8, 3, 3, 1, 1}, 4, 12 * 9 * 4 * 4, 70, DType::F16); }},
        {"norm_silu_inplace_q4_1_weight",
         [] { return norm_conv_inplace_check({1, 32, 7, 6, 16, 3, 3, 1, 1}, 4, 32 * 9 * 4 * 4, 89, DType::Q4_1); }},
        // Not over the input (two images, stride 2, more output channels, two weight tiles): a new tensor.
        {"norm_silu_inplace_b2_new_tensor", [] { return norm_conv_inplace_check({2, 6, 5, 4, 4, 3, 3, 1, 1}, 3, kDefault, 71); }},
        {"norm_silu_inplace_s2_new_tensor", [] { return norm_conv_inplace_check({1, 6, 9, 7, 4, 3, 3, 2, 1}, 3, kDefault, 72); }},
        {"norm_silu_inplace_wider_new_tensor", [] { return norm_conv_inplace_check({1, 4, 5, 4, 6, 3, 3, 1, 1}, 2, kDefault, 73); }},
        {"norm_silu_inplace_weight_tiles_new_tensor",
         [] { return norm_conv_inplace_check({1, 6, 5, 4, 4, 3, 3, 1, 1}, 3, kDefault, 74, DType::F16, 2 * 6 * 9 * 4); }},
    };
}

// -------------------------------------------------------------------------------------- group/layer norm
// y = (x - mean) rstd gamma + beta computed with statistics in double and two or three float
// roundings per element: |err| <= 4u (|x| + |mean|) rstd |gamma| + 2u (|beta| + |y|). `chunk`
// consecutive elements share statistics; affine(i) is element i's gamma/beta index.
Tensor norm_bound(const Tensor& x, const Tensor& y, int64_t chunk, const std::function<int64_t(int64_t)>& affine,
                  const Tensor& gamma, const Tensor& beta, float eps) {
    Tensor bound(x.shape());
    for (int64_t first = 0; first < x.numel(); first += chunk) {
        double s = 0.0, s2 = 0.0;
        for (int64_t i = first; i < first + chunk; ++i) s += x[i];
        const double mean = s / double(chunk);
        for (int64_t i = first; i < first + chunk; ++i) s2 += (x[i] - mean) * (x[i] - mean);
        const double rstd = 1.0 / std::sqrt(s2 / double(chunk) + eps);
        for (int64_t i = first; i < first + chunk; ++i) {
            const int64_t a = affine(i);
            bound[i] = static_cast<float>(4 * kU * (std::fabs(x[i]) + std::fabs(mean)) * rstd * std::fabs(gamma[a]) +
                                          2 * kU * (std::fabs(beta[a]) + std::fabs(y[i])));
        }
    }
    return bound;
}

Check group_norm_check(const Shape& shape, int groups, float eps, float offset, uint64_t seed) {
    const Tensor x = map_values(random_tensor(shape, seed), [offset](double v, int64_t) { return v + offset; });
    const int64_t c = shape[1];
    const Tensor gamma = random_tensor({c}, seed + 1, 0.5f, 1.5f), beta = random_tensor({c}, seed + 2);
    Check chk{ops::group_norm(x, groups, gamma, beta, eps), ref::group_norm(x, groups, gamma, beta, eps), {}};
    const int64_t spatial = x.numel() / (shape[0] * c);
    chk.bound = norm_bound(x, chk.expected, spatial * (c / groups), [=](int64_t i) { return (i / spatial) % c; },
                           gamma, beta, eps);
    return chk;
}

CaseList cases_group_norm() {
    return {
        {"c32_g32_7x9", [] { return group_norm_check({1, 32, 7, 9}, 32, 1e-5f, 0.0f, 41); }},
        {"c32_g1_7x9", [] { return group_norm_check({1, 32, 7, 9}, 1, 1e-5f, 0.0f, 42); }},
        {"b2_c64_g32_5x3_mean_10", [] { return group_norm_check({2, 64, 5, 3}, 32, 1e-6f, 10.0f, 43); }},
        {"b3_c6_g3_1x1", [] { return group_norm_check({3, 6, 1, 1}, 3, 1e-5f, 0.0f, 44); }},
        {"rank3_c12_g4_l33", [] { return group_norm_check({2, 12, 33}, 4, 1e-5f, 0.0f, 45); }},
        {"rank2_c8_g2", [] { return group_norm_check({4, 8}, 2, 1e-5f, 0.0f, 46); }},
        {"c33_g11_31x1", [] { return group_norm_check({1, 33, 31, 1}, 11, 1e-5f, -3.0f, 47); }},
    };
}

Check layer_norm_check(const Shape& shape, float eps, float offset, uint64_t seed) {
    const Tensor x = map_values(random_tensor(shape, seed), [offset](double v, int64_t) { return v + offset; });
    const int64_t d = shape.back();
    const Tensor gamma = random_tensor({d}, seed + 1, 0.5f, 1.5f), beta = random_tensor({d}, seed + 2);
    Check chk{ops::layer_norm(x, gamma, beta, eps), ref::layer_norm(x, gamma, beta, eps), {}};
    chk.bound = norm_bound(x, chk.expected, d, [=](int64_t i) { return i % d; }, gamma, beta, eps);
    return chk;
}

CaseList cases_layer_norm() {
    return {
        {"d1_is_beta", [] { return layer_norm_check({3, 1}, 1e-5f, 0.0f, 51); }},
        {"b2_l77_d33", [] { return layer_norm_check({2, 77, 33}, 1e-5f, 0.0f, 52); }},
        {"d31", [] { return layer_norm_check({3, 31}, 1e-5f, 0.0f, 53); }},
        {"d32_mean_5", [] { return layer_norm_check({5, 32}, 1e-5f, 5.0f, 54); }},
        {"d768_clip_width", [] { return layer_norm_check({2, 768}, 1e-5f, 0.0f, 55); }},
    };
}

// ------------------------------------------------------------------------------------------- attention
// Scores carry an absolute error up to (D + 2) u A_i, A_i = max_j sum_d |q_id k_jd| / sqrt(D); with the
// rounding of s - max (<= 2 u A_i) and the exp (<= 3u) each unnormalised weight is off by a factor
// (1 + eta), eta <= (D + 4) u A_i + 3u, which normalisation at most doubles. The float sum of Lk weights
// and the Lk-term product with v add (Lk + 1) u each, the final division 2u. So
// |err| <= ((2D + 8) A_i + 2 Lk + 16) u * sum_j p_ij |v_jc|, the last factor being attention(q, k, |v|).
struct AttnShape {
    int64_t batch, lq, lk;
    int heads;
    int64_t d;
    bool causal;
    int64_t block_rows;  // 0: the default policy
    float q_scale = 1.0f;
};

Check attention_check(const AttnShape& s, uint64_t seed) {
    const int64_t width = s.heads * s.d;
    const Tensor q = scaled(random_tensor({s.batch, s.lq, width}, seed), s.q_scale);
    const Tensor k = random_tensor({s.batch, s.lk, width}, seed + 1);
    const Tensor v = random_tensor({s.batch, s.lk, width}, seed + 2);
    Check c{detail::attention_blocked(q, k, v, s.heads, s.causal, s.block_rows),
            ref::attention(q, k, v, s.heads, s.causal), {}};
    const Tensor weighted_abs_v = ref::attention(q, k, abs_of(v), s.heads, s.causal);
    c.bound = Tensor(c.expected.shape());
    for (int64_t b = 0; b < s.batch; ++b)
        for (int h = 0; h < s.heads; ++h)
            for (int64_t i = 0; i < s.lq; ++i) {
                double a = 0.0;
                for (int64_t j = 0; j < s.lk; ++j) {
                    double t = 0.0;
                    for (int64_t e = 0; e < s.d; ++e)
                        t += std::fabs(q[(b * s.lq + i) * width + h * s.d + e] * k[(b * s.lk + j) * width + h * s.d + e]);
                    a = std::max(a, t / std::sqrt(double(s.d)));
                }
                const double factor = ((2.0 * s.d + 8) * a + 2.0 * s.lk + 16) * kU;
                for (int64_t e = 0; e < s.d; ++e) {
                    const int64_t idx = (b * s.lq + i) * width + h * s.d + e;
                    c.bound[idx] = static_cast<float>(factor * weighted_abs_v[idx]);
                }
            }
    return c;
}

CaseList cases_attention() {
    return {
        {"single_query_single_key", [] { return attention_check({1, 1, 1, 1, 1, false, 0}, 61); }},
        {"clip_causal_b2_l77_h8_d8", [] { return attention_check({2, 77, 77, 8, 8, true, 0}, 62); }},
        {"cross_lq33_lk77_h8_d5", [] { return attention_check({2, 33, 77, 8, 5, false, 0}, 63); }},
        {"h1_d40_lq31_lk300", [] { return attention_check({1, 31, 300, 1, 40, false, 0}, 64); }},
        {"causal_b2_l300_h2_d16", [] { return attention_check({2, 300, 300, 2, 16, true, 0}, 65); }},
        {"long_keys_lk2000", [] { return attention_check({1, 5, 2000, 2, 8, false, 0}, 66); }},
        // Forced small blocks: several per head, the last one partial.
        {"blocks16_causal_lq70_lk50_h3", [] { return attention_check({1, 70, 50, 3, 8, true, 16}, 67); }},
        {"blocks16_lq64_lk33_h8_d4", [] { return attention_check({2, 64, 33, 8, 4, false, 16}, 68); }},
        {"blocks7_causal_lq33_lk33_h1", [] { return attention_check({1, 33, 33, 1, 32, true, 7}, 69); }},
        {"blocks1_lq5_lk9", [] { return attention_check({1, 5, 9, 2, 3, false, 1}, 70); }},
        {"causal_lq_gt_lk", [] { return attention_check({1, 40, 20, 2, 4, true, 16}, 71); }},
        // Large scores (|s| up to ~60): the max subtraction must keep exp in range.
        {"large_scores_q_x30", [] { return attention_check({1, 40, 64, 2, 16, false, 0, 30.0f}, 72); }},
        {"empty_queries", [] { return attention_check({1, 0, 5, 1, 4, false, 0}, 73); }},
    };
}

// ----------------------------------------------------------------------------------------- activations
// Inputs: a sweep over [-12, 12], the extremes +-100, both zeros, and random values in a shape of 33s.
Tensor activation_input(uint64_t seed) {
    Tensor x = random_tensor({3, 5, 33}, seed, -8.0f, 8.0f);
    const float specials[] = {0.0f, -0.0f, 100.0f, -100.0f, 1e-30f, -1e-30f, 20.0f, -20.0f};
    int64_t i = 0;
    for (float s : specials) x[i++] = s;
    for (; i < 200; ++i) x[i] = -12.0f + 24.0f * float(i - 8) / 192.0f;
    return x;
}

using InplaceOp = void (*)(Tensor&);

Check activation_check(InplaceOp op, InplaceOp ref_op, const Tensor& x,
                       const std::function<double(double x, double y)>& bound) {
    Tensor actual = x, expected = x;
    op(actual);
    ref_op(expected);
    Check c{actual, expected, {}};
    c.bound = map_values(expected, [&](double y, int64_t i) { return bound(x[i], y); });
    return c;
}

// silu = x / (1 + e^-x): exp within 3u, then three roundings: <= 8u |y|.
double silu_bound(double, double y) { return 8 * kU * std::fabs(y) + kUnderflow; }
// gelu = x (1 - q/2) or x q/2 with q ~ erfc(|x|/sqrt 2): A&S 7.1.26 is within 1.5e-7 of erfc, its float
// evaluation (t, five Horner steps, exp) within ~12u q <= 12u, and rounding x/sqrt2 moves q by <= u/2:
// |err| <= |x| (0.75e-7 + 8u) + 4u |y|.
double gelu_bound(double x, double y) { return std::fabs(x) * (0.75e-7 + 8 * kU) + 4 * kU * std::fabs(y) + kUnderflow; }
// gelu_tanh = x sigmoid(2 v), v = sqrt(2/pi) (x + 0.044715 x^3): v carries ~6u relative error, which moves
// log sigmoid(2v) by <= 12u |v|; plus 8u for the sigmoid itself.
double gelu_tanh_bound(double x, double y) {
    const double v = std::sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x);
    return (8 + 12 * std::fabs(v)) * kU * std::fabs(y) + kUnderflow;
}
// quick_gelu = x sigmoid(1.702 x): 1.702f and the product carry 1.5u relative, moving the argument by
// <= 2.6u |x|; plus silu's 8u.
double quick_gelu_bound(double x, double y) { return (8 + 3 * std::fabs(x)) * kU * std::fabs(y) + kUnderflow; }

CaseList cases_silu_() {
    return {{"sweep_and_extremes", [] { return activation_check(ops::silu_, ref::silu_, activation_input(81), silu_bound); }},
            {"single", [] { return activation_check(ops::silu_, ref::silu_, Tensor({1}, {-0.5f}), silu_bound); }},
            {"empty", [] { return activation_check(ops::silu_, ref::silu_, Tensor({0, 3}), silu_bound); }}};
}
CaseList cases_gelu_() {
    return {{"sweep_and_extremes", [] { return activation_check(ops::gelu_, ref::gelu_, activation_input(82), gelu_bound); }},
            {"single", [] { return activation_check(ops::gelu_, ref::gelu_, Tensor({1, 1}, {1.25f}), gelu_bound); }}};
}
CaseList cases_gelu_tanh_() {
    return {{"sweep_and_extremes",
             [] { return activation_check(ops::gelu_tanh_, ref::gelu_tanh_, activation_input(83), gelu_tanh_bound); }}};
}
CaseList cases_quick_gelu_() {
    return {{"sweep_and_extremes",
             [] { return activation_check(ops::quick_gelu_, ref::quick_gelu_, activation_input(84), quick_gelu_bound); }}};
}

Check geglu_check(const Shape& shape, uint64_t seed) {
    const Tensor x = random_tensor(shape, seed, -6.0f, 6.0f);
    Check c{ops::geglu(x), ref::geglu(x), {}};
    const int64_t n = shape.back() / 2;
    // value * gelu(gate): gelu's bound scaled by |value|, plus the product's rounding.
    c.bound = map_values(c.expected, [&](double y, int64_t i) {
        const int64_t r = i / n, j = i % n;
        const double value = x[r * 2 * n + j], gate = x[r * 2 * n + n + j];
        const double g = 0.5 * gate * std::erfc(-gate / std::sqrt(2.0));
        return std::fabs(value) * gelu_bound(gate, g) + kU * std::fabs(y) + kUnderflow;
    });
    return c;
}

CaseList cases_geglu() {
    return {{"n1", [] { return geglu_check({1, 2}, 91); }},
            {"b2_l77_n33", [] { return geglu_check({2, 77, 66}, 92); }},
            {"n65", [] { return geglu_check({5, 130}, 93); }}};
}

// --------------------------------------------------------------------------------------- data movement
Check exact(Tensor actual, Tensor expected) {
    Tensor zero(expected.shape());
    return {std::move(actual), std::move(expected), std::move(zero)};
}

CaseList cases_upsample_nearest2x() {
    auto run = [](Shape s, uint64_t seed) {
        const Tensor x = random_tensor(s, seed);
        return exact(ops::upsample_nearest2x(x), ref::upsample_nearest2x(x));
    };
    return {{"1x1x1x1", [=] { return run({1, 1, 1, 1}, 101); }},
            {"b2_c3_5x7", [=] { return run({2, 3, 5, 7}, 102); }},
            {"c33_4x1", [=] { return run({1, 33, 4, 1}, 103); }}};
}

CaseList cases_concat_channels() {
    auto run = [](Shape a, Shape b, uint64_t seed) {
        const Tensor ta = random_tensor(a, seed), tb = random_tensor(b, seed + 1);
        return exact(ops::concat_channels(ta, tb), ref::concat_channels(ta, tb));
    };
    return {{"nchw_3_plus_4", [=] { return run({2, 3, 5, 7}, {2, 4, 5, 7}, 111); }},
            {"rank2", [=] { return run({3, 1}, {3, 2}, 112); }},
            {"rank3_empty_a", [=] { return run({2, 0, 4}, {2, 3, 4}, 113); }},
            {"rank5", [=] { return run({1, 2, 3, 1, 2}, {1, 1, 3, 1, 2}, 114); }},
            {"skip_connection_c320_c640_9x7", [=] { return run({2, 320, 9, 7}, {2, 640, 9, 7}, 115); }}};
}

// One rounding of an exact sum or product: <= u |expected| (the reference rounds the same value).
Check one_rounding(Tensor actual, Tensor expected) {
    Tensor bound = map_values(expected, [](double y, int64_t) { return kU * std::fabs(y); });
    return {std::move(actual), std::move(expected), std::move(bound)};
}

CaseList cases_add_() {
    auto run = [](Shape s, uint64_t seed) {
        const Tensor a = random_tensor(s, seed), b = random_tensor(s, seed + 1, -100.0f, 100.0f);
        Tensor actual = a, expected = a;
        ops::add_(actual, b);
        ref::add_(expected, b);
        return one_rounding(actual, expected);
    };
    return {{"single", [=] { return run({1}, 121); }}, {"b2_c33_7x5", [=] { return run({2, 33, 7, 5}, 122); }}};
}

CaseList cases_add_channel_bias_() {
    auto run = [](Shape s, uint64_t seed) {
        const Tensor x = random_tensor(s, seed), bias = random_tensor({s[0], s[1]}, seed + 1);
        Tensor actual = x, expected = x;
        ops::add_channel_bias_(actual, bias);
        ref::add_channel_bias_(expected, bias);
        return one_rounding(actual, expected);
    };
    return {{"b2_c33_5x7", [=] { return run({2, 33, 5, 7}, 131); }},
            {"1x1x1x1", [=] { return run({1, 1, 1, 1}, 132); }},
            {"rank3", [=] { return run({2, 3, 4}, 133); }},
            {"rank2", [=] { return run({3, 31}, 134); }}};
}

CaseList cases_scale_() {
    auto run = [](Shape s, float factor, uint64_t seed) {
        const Tensor x = random_tensor(s, seed);
        Tensor actual = x, expected = x;
        ops::scale_(actual, factor);
        ref::scale_(expected, factor);
        return one_rounding(actual, expected);
    };
    return {{"vae_factor", [=] { return run({1, 4, 9, 7}, 0.18215f, 141); }},
            {"negative", [=] { return run({33}, -3.0f, 142); }}};
}

CaseList cases_nchw_to_nlc() {
    auto run = [](Shape s, uint64_t seed) {
        const Tensor x = random_tensor(s, seed);
        return exact(ops::nchw_to_nlc(x), ref::nchw_to_nlc(x));
    };
    return {{"b2_c33_7x5", [=] { return run({2, 33, 7, 5}, 151); }},
            {"1x1x1x1", [=] { return run({1, 1, 1, 1}, 152); }},
            {"c320_8x8_whole_tiles", [=] { return run({1, 320, 8, 8}, 153); }},
            {"b3_c31_33x1", [=] { return run({3, 31, 33, 1}, 154); }}};
}

CaseList cases_nlc_to_nchw() {
    auto run = [](Shape s, int64_t h, int64_t w, uint64_t seed) {
        const Tensor x = random_tensor(s, seed);
        return exact(ops::nlc_to_nchw(x, h, w), ref::nlc_to_nchw(x, h, w));
    };
    return {{"b2_7x5_c33", [=] { return run({2, 35, 33}, 7, 5, 161); }},
            {"1x1", [=] { return run({1, 1, 1}, 1, 1, 162); }},
            {"c320_8x8", [=] { return run({1, 64, 320}, 8, 8, 163); }},
            {"33x1_c31", [=] { return run({3, 33, 31}, 33, 1, 164); }}};
}

// --------------------------------------------------------------------------------------------- softmax
// e_i = e^(x_i - m) is off by u |x_i - m| (the subtraction) + 3u (the exp); normalising by a float sum
// of n of them adds the largest such error, n u, and 2u for the division and product:
// |err_i| <= p_i u (|x_i - m| + max_j |x_j - m| + n + 10). Elements at -inf must come out exactly 0.
Check softmax_check(const Tensor& x) {
    Check c{ops::softmax_lastdim(x), ref::softmax_lastdim(x), Tensor(x.shape())};
    const int64_t n = x.dim(-1);
    for (int64_t r = 0; n > 0 && r < x.numel() / n; ++r) {
        double m = -INFINITY, spread = 0.0;
        for (int64_t i = 0; i < n; ++i) m = std::max(m, double(x[r * n + i]));
        for (int64_t i = 0; i < n; ++i)
            if (std::isfinite(x[r * n + i])) spread = std::max(spread, m - x[r * n + i]);
        for (int64_t i = 0; i < n; ++i) {
            const double xi = x[r * n + i];
            const double dist = std::isfinite(xi) ? m - xi : 0.0;
            c.bound[r * n + i] = static_cast<float>(c.expected[r * n + i] * kU * (dist + spread + double(n) + 10));
        }
    }
    return c;
}

CaseList cases_softmax_lastdim() {
    return {{"single", [] { return softmax_check(Tensor({1}, {3.5f})); }},
            {"n31", [] { return softmax_check(random_tensor({31}, 171)); }},
            {"rows2_n33", [] { return softmax_check(random_tensor({2, 33}, 172)); }},
            {"wide_range_x20_n257", [] { return softmax_check(scaled(random_tensor({3, 4, 257}, 173), 20.0)); }},
            {"masked_minus_inf", [] {
                 Tensor x = random_tensor({2, 9}, 174);
                 x[3] = x[4] = x[12] = -INFINITY;
                 return softmax_check(x);
             }}};
}

// ---------------------------------------------------------------------------------- timestep embedding
// The reference transcribes diffusers' float32 steps; with the same correctly rounded exp/sin/cos both
// must agree exactly.
CaseList cases_timestep_embedding() {
    auto run = [](std::vector<float> t, int dim, bool flip, float shift) {
        return exact(ops::timestep_embedding(t, dim, flip, shift), ref::timestep_embedding(t, dim, flip, shift));
    };
    return {{"sd_unet_981_1_d320_flip_shift0", [=] { return run({981.0f, 1.0f}, 320, true, 0.0f); }},
            {"d256_noflip_shift1", [=] { return run({999.0f, 0.0f, 500.5f}, 256, false, 1.0f); }},
            {"sdxl_time_ids_d256", [=] { return run({1024.0f, 1024.0f, 0.0f, 0.0f, 1024.0f, 1024.0f}, 256, true, 0.0f); }},
            {"odd_dim_7", [=] { return run({3.0f, 250.0f}, 7, false, 1.0f); }},
            {"dim_1_only_padding", [=] { return run({5.0f}, 1, true, 0.0f); }},
            {"dim_2_shift_0", [=] { return run({0.5f, 77.0f}, 2, false, 0.0f); }}};
}

// ----------------------------------------------------------------------------------------------- table
// Generated from the op list, so an op without a case list does not compile.
struct TableEntry {
    OpKind kind;
    CaseList (*cases)();
};
const TableEntry kTable[] = {
#define KILN_OP_CASES(kind, fn) {OpKind::kind, &cases_##fn},
    KILN_OP_LIST(KILN_OP_CASES)
#undef KILN_OP_CASES
};
static_assert(sizeof(kTable) / sizeof(kTable[0]) == kOpCount);

struct NamedCase {
    OpKind kind;
    OpCase c;
};

std::vector<NamedCase> all_cases() {
    std::vector<NamedCase> all;
    for (const TableEntry& e : kTable)
        for (OpCase& c : e.cases()) all.push_back({e.kind, std::move(c)});
    return all;
}

void PrintTo(const NamedCase& c, std::ostream* os) { *os << op_name(c.kind) << "/" << c.c.name; }

class OpsVsReference : public ::testing::TestWithParam<NamedCase> {};

TEST_P(OpsVsReference, WithinFloat32Bound) {
    const NamedCase& nc = GetParam();
    const Check check = nc.c.run();
    const CheckOutcome out = compare(check);
    std::printf("[ops] %-18s %-36s max|err| %.3g  worst err/bound %.3g\n", op_name(nc.kind), nc.c.name.c_str(),
                out.max_abs_err, out.worst_ratio);
    EXPECT_TRUE(out.ok) << op_name(nc.kind) << " / " << nc.c.name << ":\n" << out.message;
}

std::string case_test_name(const ::testing::TestParamInfo<NamedCase>& info) {
    std::string name = std::string(op_name(info.param.kind)) + "__" + info.param.c.name;
    for (char& ch : name)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return name;
}

INSTANTIATE_TEST_SUITE_P(EveryOp, OpsVsReference, ::testing::ValuesIn(all_cases()), case_test_name);

TEST(OpsVsReferenceTable, EveryOpHasCases) {
    for (const TableEntry& e : kTable) EXPECT_FALSE(e.cases().empty()) << op_name(e.kind);
}

}  // namespace
}  // namespace kiln::ops::testing
