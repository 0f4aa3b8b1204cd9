// The block formats (quant/block_formats.h) over all their codes and at their edges. Expected values come
// from the formats' definitions evaluated independently (core/half.h's fp16 decoder, double arithmetic);
// the codes ggml's converter writes are checked against gguf-py in tests/io (gguf_reference_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype_convert.h"
#include "core/half.h"
#include "kiln/error.h"
#include "quant/block_formats.h"

using namespace kiln;

namespace {

constexpr DType kFormats[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1};

std::vector<uint8_t> quantized(DType t, const std::vector<float>& x) {
    std::vector<uint8_t> out(size_t(dtype_storage_bytes(t, int64_t(x.size()))));
    quantize_values(t, x.data(), out.data(), x.size());
    return out;
}

std::vector<float> dequantized(DType t, const std::vector<uint8_t>& blocks) {
    std::vector<float> out(blocks.size() / dtype_block_bytes(t) * 32);
    decode_to_float(t, blocks.data(), out.data(), out.size());
    return out;
}

// fp16 scales worth trying: ones, a fraction, the largest normal, the smallest normal, subnormals, zero,
// negative (q4_0 stores negative scales; q4_1's minimum is often negative).
const uint16_t kScales[] = {0x3c00, 0x3555, 0x7bff, 0x0400, 0x03ff, 0x0001, 0x0000, 0xc000, 0x8001};

}  // namespace

// The layout, byte by byte: scale first (little-endian fp16), then codes; a 4-bit byte j holds values j
// (low nibble) and j + 16 (high nibble); q4_1's minimum follows its scale.
TEST(BlockFormats, ByteLayouts) {
    EXPECT_EQ(dtype_block_bytes(DType::Q8_0), 34u);
    EXPECT_EQ(dtype_block_bytes(DType::Q4_0), 18u);
    EXPECT_EQ(dtype_block_bytes(DType::Q4_1), 20u);
    float out[32];
    uint8_t q8[34] = {0x00, 0x40};  // d = 2
    q8[2] = 0xff;                   // -1
    q8[33] = 0x7f;                  // 127
    quant::dequantize_q8_0(q8, out);
    EXPECT_EQ(out[0], -2.0f);
    EXPECT_EQ(out[31], 254.0f);
    EXPECT_EQ(out[1], 0.0f);
    uint8_t q4[18] = {0x00, 0x3c};  // d = 1
    q4[2] = 0x9f;                   // value 0: 15 - 8 = 7, value 16: 9 - 8 = 1
    quant::dequantize_q4_0(q4, out);
    EXPECT_EQ(out[0], 7.0f);
    EXPECT_EQ(out[16], 1.0f);
    EXPECT_EQ(out[1], -8.0f);  // code 0
    uint8_t q41[20] = {0x00, 0x3c, 0x00, 0xc0};  // d = 1, m = -2
    q41[4 + 15] = 0x21;                          // value 15: 1 - 2, value 31: 2 - 2
    quant::dequantize_q4_1(q41, out);
    EXPECT_EQ(out[15], -1.0f);
    EXPECT_EQ(out[31], 0.0f);
    EXPECT_EQ(out[0], -2.0f);
}

// Every code at every position, under every scale: the value is the code times the scale, exactly
// (an 8-bit code times an 11-bit significand fits float32's 24 bits; q4_1 adds its minimum with one
// rounding, which the expectation makes the same way).
TEST(BlockFormats, DequantizesEveryCode) {
    for (uint16_t d : kScales) {
        const double scale = half_to_float(d);
        // q8_0: 256 codes x 32 positions, each block a rotation of the codes.
        for (int first = 0; first < 256; first += 7) {
            uint8_t block[34];
            std::memcpy(block, &d, 2);
            for (int i = 0; i < 32; ++i) block[2 + i] = uint8_t(first + i);
            float out[32];
            quant::dequantize_q8_0(block, out);
            for (int i = 0; i < 32; ++i)
                ASSERT_EQ(out[i], float(double(int8_t(uint8_t(first + i))) * scale)) << d << " " << i;
        }
        for (int shift = 0; shift < 16; ++shift) {
            uint8_t q4[18], q41[20];
            const uint16_t m = 0xbc00;  // -1
            std::memcpy(q4, &d, 2);
            std::memcpy(q41, &d, 2);
            std::memcpy(q41 + 2, &m, 2);
            auto code = [&](int i) { return (i * 5 + shift) % 16; };  // every code at every position over the shifts
            for (int j = 0; j < 16; ++j) {
                q4[2 + j] = q41[4 + j] = uint8_t(code(j) | (code(j + 16) << 4));
            }
            float o4[32], o41[32];
            quant::dequantize_q4_0(q4, o4);
            quant::dequantize_q4_1(q41, o41);
            for (int i = 0; i < 32; ++i) {
                ASSERT_EQ(o4[i], float(double(code(i) - 8) * scale)) << d << " " << i;
                ASSERT_EQ(o41[i], float(code(i)) * float(scale) + -1.0f) << d << " " << i;
            }
        }
    }
}

// Quantizing what a block decodes to gives the block back when it holds the codes that set the scale
// (q8_0: +-127; q4_0: code 0, the value -8 d; q4_1: codes 0 and 15): the scale is recovered exactly
// (127 d / 127, -8 d / -8, 15 d / 15 are exact), and each value / d lands on its code.
TEST(BlockFormats, RoundTripsEveryCode) {
    const uint16_t scales[] = {0x3c00, 0x3555, 0x2e66, 0x0400, 0x03ff, 0x0021, 0xb800};
    for (uint16_t d : scales) {
        for (int first = 0; first < 256; first += 5) {
            uint8_t block[34], again[34];
            std::memcpy(block, &d, 2);
            for (int i = 0; i < 32; ++i) {
                int c = int8_t(uint8_t(first + i));
                block[2 + i] = uint8_t(int8_t(c == -128 ? -127 : c));  // ggml never writes -128
            }
            block[2 + 5] = uint8_t(int8_t(first % 2 ? 127 : -127));
            if ((d & 0x8000) != 0) continue;  // q8_0's scale is never negative
            float x[32];
            quant::dequantize_q8_0(block, x);
            ASSERT_TRUE(quant::quantize_q8_0(x, again));
            ASSERT_EQ(0, std::memcmp(block, again, 34)) << "q8_0 scale " << d << " first " << first;
        }
        for (int shift = 0; shift < 16; ++shift) {
            auto code = [&](int i) { return (i * 7 + shift) % 16; };
            uint8_t q4[18], q41[20], again4[18], again41[20];
            const uint16_t m = d == 0xb800 ? 0x3c00 : uint16_t(float_to_half(-4.0f * half_to_float(d)));
            std::memcpy(q4, &d, 2);
            std::memcpy(q41, &d, 2);
            std::memcpy(q41 + 2, &m, 2);
            for (int j = 0; j < 16; ++j) q4[2 + j] = q41[4 + j] = uint8_t(code(j) | (code(j + 16) << 4));
            float x[32];
            quant::dequantize_q4_0(q4, x);
            ASSERT_TRUE(quant::quantize_q4_0(x, again4));
            ASSERT_EQ(0, std::memcmp(q4, again4, 18)) << "q4_0 scale " << d << " shift " << shift;
            if ((d & 0x8000) != 0) continue;  // q4_1's scale is max - min >= 0
            quant::dequantize_q4_1(q41, x);
            ASSERT_TRUE(quant::quantize_q4_1(x, again41));
            ASSERT_EQ(0, std::memcmp(q41, again41, 20)) << "q4_1 scale " << d << " shift " << shift;
        }
    }
}

// The error of a round trip stays inside what the format allows. With d the float32 scale and d16 its fp16
// rounding, |d - d16| <= max(|d| 2^-11, 2^-25) (half an fp16 ulp, relative for normals, absolute 2^-25 for
// subnormals). Each value decodes as q d16 while the code q was chosen for d:
//   q8_0: |x - q d| <= d/2 (rounding), and |q| <= 127         -> bound d/2 + 127 |d - d16|
//   q4_0: |x - (q-8) d| <= d, the clamp at code 15 costing a full step for the value of sign opposite to
//         the scale's (x = -M when M set d = M/-8)           -> bound |d| + 8 |d - d16|
//   q4_1: |x - (q d + min)| <= d/2, q <= 15, min rounded too  -> bound d/2 + 15 |d - d16| + |min - min16|
// plus a few float32 roundings of values of magnitude amax: 4 amax 2^-24.
TEST(BlockFormats, ErrorStaysWithinTheFormatsBound) {
    std::mt19937 gen(22);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const float magnitudes[] = {1.0f, 3e-2f, 1e-5f /* subnormal scales */, 1e-9f /* scales that flush to 0 */, 4000.0f};
    for (float mag : magnitudes) {
        std::vector<float> x(32 * 64);
        for (float& v : x) v = normal(gen) * mag;
        x[100] = 0.0f;
        for (int i = 64; i < 96; ++i) x[i] = 0.0f;       // a block of zeros
        x[200] = 50.0f * mag;                             // a block with one large value
        for (DType t : kFormats) {
            const std::vector<float> y = dequantized(t, quantized(t, x));
            for (size_t b = 0; b < x.size() / 32; ++b) {
                float amax = 0, lo = x[b * 32], hi = x[b * 32];
                for (int i = 0; i < 32; ++i) {
                    amax = std::max(amax, std::fabs(x[b * 32 + i]));
                    lo = std::min(lo, x[b * 32 + i]);
                    hi = std::max(hi, x[b * 32 + i]);
                }
                auto half_err = [](double v) { return std::max(std::fabs(v) * 0x1p-11, 0x1p-25); };
                double bound = 4.0 * amax * 0x1p-24;
                if (t == DType::Q8_0) bound += amax / 127.0 / 2 + 127 * half_err(amax / 127.0);
                if (t == DType::Q4_0) bound += amax / 8.0 + 8 * half_err(amax / 8.0);
                if (t == DType::Q4_1) bound += (hi - lo) / 15.0 / 2 + 15 * half_err((hi - lo) / 15.0) + half_err(lo);
                for (int i = 0; i < 32; ++i)
                    ASSERT_LE(std::fabs(double(x[b * 32 + i]) - y[b * 32 + i]), bound)
                        << dtype_name(t) << " magnitude " << mag << " value " << b * 32 + i;
            }
            // A block of zeros decodes to zeros; so do the small values beside one large value in q8_0
            // and q4_0 (they round to code 0 / 8) and that value itself comes back to fp16's precision.
            for (int i = 64; i < 96; ++i) ASSERT_EQ(y[i], 0.0f) << dtype_name(t);
        }
    }
}

TEST(BlockFormats, OneLargeValueInABlock) {
    std::vector<float> x(32, 0.0f);
    x[7] = 1000.0f;
    x[8] = -1e-3f;  // far below the step: code 0 in q8_0, code 8 in q4_0
    for (DType t : kFormats) {
        const std::vector<float> y = dequantized(t, quantized(t, x));
        EXPECT_NEAR(y[7], 1000.0f, 1000.0 * 0x1p-10) << dtype_name(t);  // fp16 scale, times at most 127
        for (int i = 0; i < 32; ++i) {
            if (i != 7 && t != DType::Q4_1) EXPECT_EQ(y[i], 0.0f) << dtype_name(t) << " " << i;
        }
    }
    // q4_1 keeps the minimum exactly where fp16 can: 0 and -1e-3 here (min = -1e-3 rounds to fp16).
    const std::vector<float> y = dequantized(DType::Q4_1, quantized(DType::Q4_1, x));
    EXPECT_EQ(y[8], half_to_float(float_to_half(-1e-3f)));
}

TEST(BlockFormats, RejectsNonFiniteValues) {
    const float bad[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity()};
    for (DType t : kFormats) {
        for (float v : bad) {
            std::vector<float> x(96, 0.5f);
            x[40] = v;
            try {
                quantized(t, x);
                ADD_FAILURE() << dtype_name(t) << " accepted " << v;
            } catch (const Error& e) {
                EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
                EXPECT_NE(std::string(e.what()).find("value 40 is " + std::string(std::isnan(v) ? "NaN" : "infinite")),
                          std::string::npos)
                    << e.what();
            }
        }
        // Finite values whose scale fp16 cannot hold (q8_0: 1e10 / 127 > 65504).
        std::vector<float> huge(32, 1e10f);
        huge[0] = -3e38f;
        EXPECT_THROW(quantized(t, huge), Error) << dtype_name(t);
        // Counts that are not whole blocks.
        std::vector<float> odd(33, 1.0f);
        EXPECT_THROW(quantized(t, odd), Error) << dtype_name(t);
    }
}
