// int8 products of block weights (ops/int8_dot.h: every block format) in linear and conv2d, on each ISA path this
// CPU has.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ctime>
#include <functional>
#include <limits>
#include <string>
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

// The formats the int8 products take (int8_dot_weights.h: the block formats but q2_K), and K a multiple of their block.
constexpr DType kFormats[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                              DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q3_K};
bool fits(DType f, int64_t k) { return k % dtype_block_values(f) == 0; }

Tensor block_weight(const Shape& shape, DType f, uint64_t seed) { return random_tensor(shape, seed).converted(f); }
Tensor q8_weight(const Shape& shape, uint64_t seed) { return block_weight(shape, DType::Q8_0, seed); }

// A weight row as the int8 product sees it: value i = a[i] + m[i / 32], a = scale x code (q6_K: scale x its
// half's factor x code; exact in float64).
struct WidenedRow {
    std::vector<double> a, m;
};
double widened_value(const detail::Int8Row& row, int64_t b, int i) {
    const double factor = row.halves ? row.halves[2 * b + i / 16] : 1;
    return double(row.scales[b]) * factor * int8_t(row.codes[b * row.code_stride + i]);
}
std::vector<WidenedRow> widened_rows(const Tensor& wq) {
    const detail::Int8Weights w(wq, "test");
    std::vector<uint8_t> scratch(size_t(w.scratch_bytes(1)) + 4);
    std::vector<WidenedRow> out(size_t(w.rows()));
    for (int64_t o = 0; o < w.rows(); ++o) {
        detail::Int8Row row;
        w.rows_view(o, 1, scratch.data(), &row);
        for (int64_t b = 0; b < w.k_blocks(); ++b) {
            out[o].m.push_back(row.mins ? row.mins[b] : 0.0);
            for (int i = 0; i < 32; ++i) out[o].a.push_back(widened_value(row, b, i));
        }
    }
    return out;
}

// One output's float64 reference sum_k x_k w_k + bias (w the dequantized weights) and its bound. The int8 path
// computes sum_b fl(dx_b dw_b) D_b + m_b fl(dx_b S_b), D_b the exact integer dot of the codes, S_b the sum of the
// activation codes, by fmas in block order, then adds the bias. (1) Activations: dx = fl(amax / 127) <=
// (amax / 127)(1 + u), q = round(fl(x fl(1 / dx))) with fl(x fl(1 / dx)) = x / dx within 2.01u relative and
// |x / dx| <= 127 (1 + u): |q dx - x| <= dx (0.5 + 256u) =: e (a block under 1e-30 is zeros: e = amax).
// (2) Weights: the int8 path's value a + m is the dequantized w before its two roundings (fl(a), then the sum:
// quant/*.h), |a + m - w| <= u (|a| + |w|); 0 for the formats without a min (whose w = a exactly). q6_K's dot is
// h0 D_lo + h1 D_hi, an integer below 2^24 (exact as a float), so its terms are those of the others.
// (3) Float: each term fl(dx dw) D_b and m fl(dx S) is off by u relative; 2B fma additions and the bias add at
// most (2B + 1) u more, of sum |terms| <= sum_k (|x_k| + e)(|a_k| + |m_k|) + |bias|: (2B + 3) 1.01 u of that.
struct Expected {
    double value, bound;
};
Expected expected_output(const float* x, int64_t x_stride, const float* w, const WidenedRow& row, int64_t k,
                         float bias) {
    double sum = bias, rounding = 0, magnitude = std::fabs(bias);
    for (int64_t b0 = 0; b0 < k; b0 += 32) {
        double amax = 0;
        for (int64_t i = b0; i < b0 + 32; ++i) amax = std::max(amax, std::fabs(double(x[i * x_stride])));
        const double e = amax < 1e-30 ? amax : (amax / 127) * (1 + kU) * (0.5 + 256 * kU);
        const double m = row.m[size_t(b0 / 32)];
        for (int64_t i = b0; i < b0 + 32; ++i) {
            const double xi = std::fabs(double(x[i * x_stride])), a = std::fabs(row.a[size_t(i)]);
            sum += double(x[i * x_stride]) * w[i];
            rounding += e * (a + std::fabs(m)) + (m != 0 ? xi * kU * (a + std::fabs(w[i])) : 0.0);
            magnitude += (xi + e) * (a + std::fabs(m));
        }
    }
    return {sum, rounding + double(2 * (k / 32) + 3) * 1.01 * kU * magnitude};
}

std::vector<Int8Isa> paths() {  // those this CPU has; the others are refused
    std::vector<Int8Isa> out;
    for (Int8Isa isa : {Int8Isa::Scalar, Int8Isa::Avx2, Int8Isa::AvxVnni, Int8Isa::Avx512Vnni}) {
        if (detail::int8_isa_available(isa)) out.push_back(isa);
        else EXPECT_THROW(detail::force_int8_isa(isa), Error);
    }
    return out;
}

// Within the bounds, and not the dequantized product's bits (else the int8 path did not run); the worst error /
// bound so far into *worst.
void expect_within(const Tensor& y, const Tensor& dequantized, const std::vector<Expected>& want,
                   const std::string& what, double* worst) {
    ASSERT_EQ(y.numel(), int64_t(want.size())) << what;
    bool differs = false;
    for (size_t i = 0; i < want.size(); ++i) {
        const double err = std::fabs(double(y.data()[i]) - want[i].value);
        ASSERT_LE(err, want[i].bound) << what << ": output " << i << " " << y.data()[i] << " vs " << want[i].value;
        *worst = std::max(*worst, err / want[i].bound);
        differs = differs || y.data()[i] != dequantized.data()[i];
    }
    EXPECT_TRUE(differs) << what << ": the dequantized path's bits";
}

bool same_bits(const Tensor& a, const Tensor& b) {
    return a.numel() == b.numel() && std::memcmp(a.data(), b.data(), size_t(a.numel()) * sizeof(float)) == 0;
}

// rows, in, out, bias: 1 row or output; rows past groups of 16 and blocks of 3 groups; outputs past blocks of 4
// rows; K of 1 to 64 blocks; 70 outputs: chunks of several row tiles (widened formats), the last tile short;
// 200 rows x 64 blocks: 3 panels of columns, the last one short. (The k-quants take K a multiple of 256.)
constexpr int64_t kLinearShapes[][4] = {{1, 32, 1, 1},    {1, 64, 5, 0},   {3, 96, 4, 1},
                                        {17, 160, 9, 1},  {16, 32, 16, 0}, {50, 288, 13, 1},
                                        {5, 256, 9, 1},   {20, 64, 70, 1}, {33, 1024, 7, 0}, {200, 2048, 6, 1}};

// On each path (worst[i]: paths()[i]'s worst error / bound); the reference once.
void check_linear(const int64_t (&s)[4], DType f, uint64_t seed, std::vector<double>& worst) {
    const int64_t rows = s[0], in = s[1], out = s[2];
    const Tensor x = random_tensor({rows, in}, seed, -2.0f, 2.0f), b = random_tensor({out}, seed + 2);
    const Tensor wq = block_weight({out, in}, f, seed + 1), w = wq.to_f32();
    const std::vector<WidenedRow> widened = widened_rows(wq);
    const Tensor* bp = s[3] ? &b : nullptr;
    std::vector<Expected> want;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < out; ++o)
            want.push_back(expected_output(x.data() + r * in, 1, w.data() + o * in, widened[size_t(o)], in,
                                           bp ? b.data()[o] : 0.0f));
    const Tensor dequantized = linear(x, w, bp);
    for (size_t i = 0; i < paths().size(); ++i) {
        ForcedIsa forced(paths()[i]);
        expect_within(linear(x, wq, bp), dequantized, want,
                      std::string(dtype_name(f)) + " linear " + std::to_string(rows) + "x" + std::to_string(in) + "->" +
                          std::to_string(out) + " " + detail::int8_isa_name(paths()[i]),
                      &worst[i]);
    }
}

// n, c, h, w, o, k, stride, padding, im2col budget: 3x3 padded (9 blocks a row), 1x1 (read in place), stride 2,
// im2col tiles of 10 pixels; 256 channels 3x3 (K of 9 k-quant blocks).
constexpr int64_t kConvShapes[][9] = {{2, 32, 7, 9, 5, 3, 1, 1, detail::kIm2colBudgetBytes},
                                      {1, 64, 5, 6, 3, 1, 1, 0, detail::kIm2colBudgetBytes},
                                      {1, 32, 9, 8, 7, 3, 2, 1, detail::kIm2colBudgetBytes},
                                      {1, 32, 6, 7, 6, 3, 1, 1, 32 * 9 * 4 * 10},
                                      {1, 256, 4, 5, 3, 3, 1, 1, detail::kIm2colBudgetBytes}};

void check_conv(const int64_t (&s)[9], DType f, uint64_t seed, std::vector<double>& worst) {
    const int64_t n_img = s[0], c = s[1], h = s[2], wd = s[3], out = s[4], k = s[5];
    const int stride = int(s[6]), pad = int(s[7]);
    const Tensor x = random_tensor({n_img, c, h, wd}, seed, -2.0f, 2.0f), b = random_tensor({out}, seed + 2);
    const Tensor wq = block_weight({out, c, k, k}, f, seed + 1), w = wq.to_f32();
    const std::vector<WidenedRow> widened = widened_rows(wq);
    const Tensor dequantized = detail::conv2d_tiled(x, w, &b, stride, pad, s[8]);
    const int64_t pixels = dequantized.dim(2) * dequantized.dim(3), kk = c * k * k;
    const detail::ConvGeometry g{c, h, wd, k, k, stride, pad, dequantized.dim(2), dequantized.dim(3)};
    std::vector<Expected> want;
    std::vector<float> col(size_t(kk * pixels));  // each output pixel's inputs (im2col.h)
    for (int64_t n = 0; n < n_img; ++n) {
        detail::im2col_tile(x.data() + n * c * h * wd, g, 0, pixels, col.data());
        for (int64_t o = 0; o < out; ++o)
            for (int64_t p = 0; p < pixels; ++p)
                want.push_back(
                    expected_output(col.data() + p, pixels, w.data() + o * kk, widened[size_t(o)], kk, b.data()[o]));
    }
    for (size_t i = 0; i < paths().size(); ++i) {
        ForcedIsa forced(paths()[i]);
        expect_within(detail::conv2d_tiled(x, wq, &b, stride, pad, s[8]), dequantized, want,
                      std::string(dtype_name(f)) + " conv2d c" + std::to_string(c) + " " + std::to_string(k) + "x" +
                          std::to_string(k) + " s" + std::to_string(stride) + " " + detail::int8_isa_name(paths()[i]),
                      &worst[i]);
    }
}

// The widened rows are the dequantized values before their roundings (Expected's (2)), and the offsets are
// 128 x the codes' sums (q6_K: each half's). Random weights and, for the formats with a min, blocks of one value
// (range 0: d = 0); each path's widening (AVX-512 or portable loops).
TEST(Int8Dot, WidenedRowsAreTheDequantizedValues) {
    for (Int8Isa isa : paths()) {
        ForcedIsa forced(isa);
        for (DType f : kFormats) {
            Tensor src = random_tensor({3, 512}, 741);
            std::fill(src.data() + 512, src.data() + 768, 0.375f);
            const Tensor wq = src.converted(f), w = wq.to_f32();
            const detail::Int8Weights weights(wq, "test");
            ASSERT_EQ(weights.has_halves(), f == DType::Q6_K || f == DType::Q3_K);
            std::vector<uint8_t> scratch(size_t(weights.scratch_bytes(3)) + 4);
            detail::Int8Row rows[3];
            weights.rows_view(0, 3, scratch.data(), rows);
            const std::string what = std::string(dtype_name(f)) + " " + detail::int8_isa_name(isa);
            for (int64_t o = 0; o < 3; ++o)
                for (int64_t b = 0; b < weights.k_blocks(); ++b) {
                    int32_t sums[2] = {0, 0};
                    for (int i = 0; i < 32; ++i) {
                        const double a = widened_value(rows[o], b, i), v = w.data()[o * 512 + 32 * b + i];
                        const double m = rows[o].mins ? rows[o].mins[b] : 0.0;
                        ASSERT_LE(std::fabs(a + m - v), rows[o].mins ? kU * (std::fabs(a) + std::fabs(v)) : 0.0)
                            << what << " row " << o << " value " << 32 * b + i;
                        sums[i / 16] += int8_t(rows[o].codes[b * rows[o].code_stride + i]);
                    }
                    if (rows[o].halves) {
                        ASSERT_EQ(rows[o].offsets[2 * b], 128 * sums[0]) << what;
                        ASSERT_EQ(rows[o].offsets[2 * b + 1], 128 * sums[1]) << what;
                    } else {
                        ASSERT_EQ(rows[o].offsets[b], 128 * (sums[0] + sums[1])) << what;
                    }
                }
        }
    }
    for (DType f : {DType::F32, DType::F16, DType::BF16}) EXPECT_FALSE(detail::int8_products_take(f));
}

TEST(Int8Dot, WithinTheRoundingBoundOnEveryPath) {
    for (DType f : kFormats) {
        uint64_t seed = 500;
        std::vector<double> worst(paths().size());
        for (const auto& s : kLinearShapes)
            if (fits(f, s[1])) check_linear(s, f, seed += 3, worst);
        for (const auto& s : kConvShapes)
            if (fits(f, s[1] * s[5] * s[5])) check_conv(s, f, seed += 3, worst);
        for (size_t i = 0; i < worst.size(); ++i)
            std::printf("[ int8 ] %-5s %-12s worst error / bound %.3f\n", dtype_name(f),
                        detail::int8_isa_name(paths()[i]), worst[i]);
    }
}

// q6_K at the ends of its ranges, blocks as a file from elsewhere may hold them: every sub-scale -128 (kiln's
// quantizer writes -127..127) with codes -32, and sub-scales alternating 127 / -128 with codes 31, against
// activations all 2 (codes 127: the largest dot, 2 x 128 x 16 x 127 x 32 < 2^24, stays exact) and +-2. Within the
// bound and the same bits on each path.
TEST(Int8Dot, Q6KExtremeSubScalesAreExact) {
    constexpr int64_t kRows = 3, kK = 512;
    std::vector<uint8_t> bytes(size_t(kRows * (kK / 256) * 210));
    for (int64_t blk = 0; blk < kRows * (kK / 256); ++blk) {
        uint8_t* p = bytes.data() + blk * 210;
        const int64_t row = blk / (kK / 256);
        const uint8_t code = row == 0 ? 0 : 63;  // q: value d sc (q - 32)
        std::fill(p, p + 128, uint8_t((code & 15) | ((code & 15) << 4)));
        std::fill(p + 128, p + 192, uint8_t(row == 0 ? 0 : 0xff));
        for (int s = 0; s < 16; ++s) p[192 + s] = uint8_t(row == 0 || s % 2 ? -128 : 127);
        const uint16_t d = row == 2 ? 0x0400 : 0x3c00;  // 2^-14 (fp16's smallest normal), 1.0
        std::memcpy(p + 208, &d, 2);
    }
    const Tensor wq = Tensor::from_blocks({kRows, kK}, DType::Q6_K, bytes), w = wq.to_f32();
    Tensor x({2, kK});
    for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = i < kK || i % 3 ? 2.0f : -2.0f;
    const std::vector<WidenedRow> widened = widened_rows(wq);
    std::vector<Expected> want;
    for (int64_t r = 0; r < 2; ++r)
        for (int64_t o = 0; o < kRows; ++o)
            want.push_back(expected_output(x.data() + r * kK, 1, w.data() + o * kK, widened[size_t(o)], kK, 0.0f));
    Tensor first;
    for (Int8Isa isa : paths()) {
        ForcedIsa forced(isa);
        const Tensor y = linear(x, wq, nullptr);
        for (size_t i = 0; i < want.size(); ++i)
            ASSERT_LE(std::fabs(double(y.data()[i]) - want[i].value), want[i].bound)
                << detail::int8_isa_name(isa) << " output " << i;
        if (first.numel() == 0) first = y;
        EXPECT_TRUE(same_bits(y, first)) << detail::int8_isa_name(isa);
    }
}

TEST(Int8Dot, PathsAgreeBitForBit) {
    const Tensor x = random_tensor({37, 512}, 701, -3.0f, 3.0f), xc = random_tensor({1, 256, 5, 4}, 703);
    const Tensor b = random_tensor({6}, 705);
    for (DType f : kFormats) {
        const Tensor wq = block_weight({11, 512}, f, 702), wc = block_weight({6, 256, 3, 3}, f, 704);
        Tensor want_linear, want_conv;
        {
            ForcedIsa forced(Int8Isa::Scalar);
            want_linear = linear(x, wq, nullptr);
            want_conv = conv2d(xc, wc, &b, 1, 1);
        }
        for (Int8Isa isa : paths()) {
            ForcedIsa forced(isa);
            EXPECT_TRUE(same_bits(linear(x, wq, nullptr), want_linear)) << dtype_name(f) << " " << detail::int8_isa_name(isa);
            EXPECT_TRUE(same_bits(conv2d(xc, wc, &b, 1, 1), want_conv)) << dtype_name(f) << " " << detail::int8_isa_name(isa);
        }
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

// A NaN or inf activation: the float path makes the outputs that read it NaN or +-inf, the int8 path NaN (q4_1:
// its min term reads the block's sum, NaN too; q6_K: its halves).
TEST(Int8Dot, NonFiniteActivationsGiveNonFiniteOutputsWhereTheFloatPathDoes) {
    for (DType f : {DType::Q8_0, DType::Q4_1, DType::Q6_K}) {
        const int64_t c = f == DType::Q6_K ? 256 : 32, in = f == DType::Q6_K ? 256 : 96;  // whole blocks
        const Tensor wq = block_weight({9, in}, f, 721), wc = block_weight({5, c, 3, 3}, f, 722);
        for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()})
            for (Int8Isa isa : paths()) {
                ForcedIsa forced(isa);
                Tensor x = random_tensor({19, in}, 723), xc = random_tensor({1, c, 6, 7}, 724);
                x.data()[5 * in + 40] = bad;
                xc.data()[(3 * 6 + 2) * 7 + 4] = bad;
                const Tensor ys[] = {linear(x, wq, nullptr), conv2d(xc, wc, nullptr, 1, 1)};
                const Tensor floats[] = {linear(x, wq.to_f32(), nullptr), conv2d(xc, wc.to_f32(), nullptr, 1, 1)};
                for (int op = 0; op < 2; ++op) {
                    int64_t nan = 0;
                    for (int64_t i = 0; i < ys[op].numel(); ++i) {
                        ASSERT_EQ(std::isfinite(ys[op].data()[i]), std::isfinite(floats[op].data()[i]))
                            << dtype_name(f) << " " << op << " " << i;
                        nan += std::isnan(ys[op].data()[i]);
                    }
                    EXPECT_EQ(nan, op == 0 ? 9 : 5 * 9) << "linear: row 5's outputs; conv2d: the 3x3 window's";
                }
            }
    }
}

// Every format the int8 products take (tests comparing the CPU with a GPU rely on it).
TEST(Int8Dot, DequantizeSettingGivesTheFloatPath) {
    const Tensor x = random_tensor({2, 5, 256}, 731), b = random_tensor({31}, 733);
    const Tensor xc = random_tensor({1, 256, 3, 4}, 734);
    const ScopedCpuQ8Products exact(CpuQ8Products::Dequantize);
    for (DType f : kFormats) {
        const Tensor w = block_weight({31, 256}, f, 732), wc = block_weight({4, 256, 3, 3}, f, 735);
        EXPECT_TRUE(same_bits(linear(x, w, &b), linear(x, w.to_f32(), &b))) << dtype_name(f);
        EXPECT_TRUE(same_bits(conv2d(xc, wc, nullptr, 1, 1), conv2d(xc, wc.to_f32(), nullptr, 1, 1))) << dtype_name(f);
    }
}

// Not a test: CPU ms (best of 3) of SD 1.5 layers whose rows are whole k-quant blocks, per format and path;
// "dequantized" is KILN_CPU_Q8=dequantize (sgemm). Run with OMP_NUM_THREADS=1 and
//   kiln_ops_tests --gtest_also_run_disabled_tests --gtest_filter='*PerfBlockWeights*'
double best_cpu_ms(const std::function<void()>& f) {
    const auto cpu = [] {
        timespec t;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
        return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
    };
    f();
    double best = 1e30;
    for (int i = 0; i < 3; ++i) {
        const double t0 = cpu();
        f();
        best = std::min(best, cpu() - t0);
    }
    return best;
}

TEST(Int8Dot, DISABLED_PerfBlockWeights) {
    const Tensor xc = random_tensor({2, 1280, 16, 16}, 761), xl = random_tensor({512, 1280}, 762);
    for (DType f : {DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
        const Tensor wc = block_weight({1280, 1280, 3, 3}, f, 763), wl = block_weight({5120, 1280}, f, 764);
        const auto run = [&](const char* how) {
            std::printf("[perf] %-5s %-12s conv 3x3 1280->1280 2x16x16 %7.1f ms   linear 1280->5120 512 rows %6.1f ms\n",
                        dtype_name(f), how, best_cpu_ms([&] { conv2d(xc, wc, nullptr, 1, 1); }),
                        best_cpu_ms([&] { linear(xl, wl, nullptr); }));
        };
        {
            const ScopedCpuQ8Products exact(CpuQ8Products::Dequantize);
            run("dequantized");
        }
        for (Int8Isa isa : paths()) {
            ForcedIsa forced(isa);
            if (isa != Int8Isa::Scalar) run(detail::int8_isa_name(isa));
        }
    }
}

}  // namespace
}  // namespace kiln::ops::testing
