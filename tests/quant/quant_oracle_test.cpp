// Every block format against gguf-py's numpy (de)quantizers, the oracle: FNV-1a digests of its outputs on the
// same pseudo-random inputs (scripts/make-quant-digests.py -> tests/data/gguf/quant-digests.txt). Dequantization
// matches bit for bit (the same float32 operations) over 512 blocks of random bytes: every code at every position,
// every fp16 class of scale. Quantization is compared where gguf-py has it (ggml's reference rules, 32-value
// formats); kiln's k-quant search is its own, so its round trip is bounded.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <vector>

#include "core/dtype_convert.h"
#include "core/half.h"
#include "kiln/error.h"

using namespace kiln;

namespace {

struct SplitMix64 {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
};

uint64_t fnv1a64(const void* data, size_t n) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(data)[i]) * 0x100000001B3ull;
    return h;
}

struct Format {
    DType dtype;
    uint64_t ggml_code;
    std::vector<int> halves;  // offsets of the fp16 fields in a block
};
const Format kFormats[] = {{DType::Q8_0, 8, {0}},      {DType::Q4_0, 2, {0}},     {DType::Q4_1, 3, {0, 2}},
                           {DType::Q5_0, 6, {0}},      {DType::Q5_1, 7, {0, 2}},  {DType::Q4_K, 12, {0, 2}},
                           {DType::Q5_K, 13, {0, 2}},  {DType::Q6_K, 14, {208}},  {DType::Q2_K, 10, {80, 82}},
                           {DType::Q3_K, 11, {108}}};
constexpr int kBlocks = 512;

uint64_t digest(const std::string& key) {
    std::ifstream f(std::string(KILN_SOURCE_DIR) + "/tests/data/gguf/quant-digests.txt");
    std::string kind, name, hex;
    while (f >> kind >> name >> hex)
        if (kind + " " + name == key) return std::stoull(hex, nullptr, 16);
    return 0;
}

std::vector<uint8_t> random_blocks(const Format& f) {
    SplitMix64 rng{f.ggml_code};
    const size_t bytes = dtype_block_bytes(f.dtype), words = (bytes + 7) / 8;
    std::vector<uint8_t> out(kBlocks * bytes);
    for (int b = 0; b < kBlocks; ++b) {
        uint8_t* block = &out[b * bytes];
        for (size_t w = 0; w < words; ++w) {
            const uint64_t v = rng.next();
            for (size_t i = 0; i < 8 && 8 * w + i < bytes; ++i) block[8 * w + i] = uint8_t(v >> (8 * i));
        }
        for (int o : f.halves)
            if ((block[o + 1] & 0x7c) == 0x7c) block[o + 1] &= 0xbf;  // an infinite or NaN fp16 made finite
    }
    return out;
}

// Block b scaled by 2^(b % 31 - 20) (subnormal to large scales); block 1 zeros, block 2 one value.
std::vector<float> random_floats(const Format& f) {
    SplitMix64 rng{1000 + f.ggml_code};
    const int64_t n = dtype_block_values(f.dtype);
    std::vector<float> x(kBlocks * n);
    for (size_t i = 0; i < x.size(); ++i)
        x[i] = float(double(int64_t(rng.next() >> 40) - (1 << 23)) / (1 << 23)) * std::ldexp(1.0f, int(i / n) % 31 - 20);
    std::fill(x.begin() + n, x.begin() + 3 * n, 0.0f);
    x[2 * n + 7] = 3.5f;
    return x;
}

}  // namespace

TEST(QuantOracle, DequantizationMatchesGgufPyBitForBit) {
    for (const Format& f : kFormats) {
        const std::vector<uint8_t> blocks = random_blocks(f);
        std::vector<float> out(kBlocks * dtype_block_values(f.dtype));
        decode_to_float(f.dtype, blocks.data(), out.data(), out.size());
        EXPECT_EQ(fnv1a64(out.data(), out.size() * 4), digest(std::string("dequantize ") + dtype_name(f.dtype)))
            << dtype_name(f.dtype);
    }
}

TEST(QuantOracle, QuantizationMatchesGgufPyWhereItQuantizes) {
    for (const Format& f : kFormats) {
        if (dtype_block_values(f.dtype) != 32) continue;
        const std::vector<float> x = random_floats(f);
        std::vector<uint8_t> out(dtype_storage_bytes(f.dtype, int64_t(x.size())));
        quantize_values(f.dtype, x.data(), out.data(), x.size());
        EXPECT_EQ(fnv1a64(out.data(), out.size()), digest(std::string("quantize ") + dtype_name(f.dtype)))
            << dtype_name(f.dtype);
    }
}

// Codes round to the nearest against the stored scales: error <= half a step, step = d * sc <= 2 amax / levels,
// where the values are in reach; the reach falls short of the span by at most a step (sub-scale rounding) and by
// the fp16 rounding of d and dmin (he: half an ulp of the stored value, 2^-25 when subnormal) times codes and
// sub-scales. Loose, but a wrong layout's errors are of the order of amax.
TEST(QuantOracle, KQuantRoundTripsWithinTheirStoredScalesReach) {
    auto he = [](float v) {
        return std::fabs(v) < std::ldexp(1.0f, -14) ? std::ldexp(1.0, -25) : std::fabs(v) * std::ldexp(1.0, -11);
    };
    for (const Format& f : kFormats) {
        if (dtype_block_values(f.dtype) != 256) continue;
        const DType t = f.dtype;
        const std::vector<float> x = random_floats(f);
        std::vector<uint8_t> q(dtype_storage_bytes(t, int64_t(x.size())));
        quantize_values(t, x.data(), q.data(), x.size());
        std::vector<float> y(x.size());
        decode_to_float(t, q.data(), y.data(), y.size());
        // levels: the codes' span; sub: the largest sub-scale code.
        const int levels = t == DType::Q2_K ? 3 : t == DType::Q3_K ? 7 : t == DType::Q4_K ? 15 : t == DType::Q5_K ? 31 : 63;
        const int sub = t == DType::Q6_K ? 127 : t == DType::Q2_K ? 15 : t == DType::Q3_K ? 32 : 63;
        for (int b = 0; b < kBlocks; ++b) {
            const uint8_t* block = &q[b * dtype_block_bytes(t)];
            auto half_at = [&](int o) { return half_to_float(uint16_t(block[o] | (block[o + 1] << 8))); };
            const double he_d = he(half_at(f.halves[0])), he_m = f.halves.size() > 1 ? he(half_at(f.halves[1])) : 0;
            double amax = 0, err = 0;
            for (int i = b * 256; i < (b + 1) * 256; ++i) {
                amax = std::max(amax, double(std::fabs(x[i])));
                err = std::max(err, double(std::fabs(x[i] - y[i])));
            }
            EXPECT_LE(err, 4 * amax / levels + sub * (levels * he_d + he_m)) << dtype_name(t) << " block " << b;
        }
        EXPECT_EQ(y[256 + 5], 0.0f) << dtype_name(t) << ": zeros stay zeros";
        std::vector<float> bad(256, 0.5f);
        bad[100] = std::nanf("");
        EXPECT_THROW(quantize_values(t, bad.data(), q.data(), 256), Error) << dtype_name(t);
    }
}
