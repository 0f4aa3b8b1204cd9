#include "core/dtype_convert.h"

#include <algorithm>
#include <bit>
#include <string>
#include <cassert>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/half.h"
#include "kiln/error.h"
#include "quant/block_formats.h"
#include "quant/k_quants.h"

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#define KILN_HAVE_F16C 1
#endif

namespace kiln {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; add byte swaps for this host");

namespace {

// Below this many elements a conversion is too short for threads to pay for themselves.
constexpr size_t kParallelMinElements = size_t{1} << 20;
constexpr size_t kBlockElements = size_t{1} << 16;

template <typename T>
inline T load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));  // unaligned-safe; compiles to a plain load
    return v;
}

template <typename T>
void decode_numbers(const uint8_t* src, float* dst, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(load<T>(src + i * sizeof(T)));
}

void decode_f64(const uint8_t* src, float* dst, size_t n) {
    // Converting an out-of-range double to float is undefined in C++; IEEE rounds it to inf from
    // FLT_MAX plus half an ulp (2^103) upwards, so do exactly that explicitly.
    constexpr double kOverflow = static_cast<double>(FLT_MAX) + 0x1p103;
    constexpr float kInf = std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < n; ++i) {
        double v = load<double>(src + i * 8);
        dst[i] = std::fabs(v) < kOverflow || std::isnan(v) ? static_cast<float>(v) : (v > 0 ? kInf : -kInf);
    }
}

void decode_f16(const uint8_t* src, float* dst, size_t n) {
    size_t i = 0;
#ifdef KILN_HAVE_F16C
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
#endif
    for (; i < n; ++i) dst[i] = half_to_float(load<uint16_t>(src + 2 * i));
}

// The scalar float_to_half took about 120 us for a sampler step's 32768 latents (on the development VM); F16C
// converts 8 at a time with the same round-to-nearest-even. Only NaNs differ (F16C keeps part of the payload,
// float_to_half gives the one quiet NaN), so a group of 8 holding one goes the scalar way.
void encode_f16(const float* src, uint8_t* dst, size_t n) {
    size_t i = 0;
#ifdef KILN_HAVE_F16C
    for (; i + 8 <= n; i += 8) {
        const __m256 f = _mm256_loadu_ps(src + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(f, f, _CMP_UNORD_Q)) != 0) {
            for (size_t k = i; k < i + 8; ++k) {
                const uint16_t h = float_to_half(src[k]);
                std::memcpy(dst + 2 * k, &h, 2);
            }
            continue;
        }
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i),
                         _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
#endif
    for (; i < n; ++i) {
        const uint16_t h = float_to_half(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
    }
}

void decode_bf16(const uint8_t* src, float* dst, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        uint32_t bits = static_cast<uint32_t>(load<uint16_t>(src + 2 * i)) << 16;
        std::memcpy(dst + i, &bits, 4);
    }
}

// One block format's functions (quant/block_formats.h, quant/k_quants.h).
struct BlockCodec {
    void (*dequantize)(const uint8_t* block, float* out);
    bool (*quantize)(const float* x, uint8_t* block);
};
BlockCodec block_codec(DType dtype) {
    switch (dtype) {
        case DType::Q8_0: return {quant::dequantize_q8_0, quant::quantize_q8_0};
        case DType::Q4_0: return {quant::dequantize_q4_0, quant::quantize_q4_0};
        case DType::Q4_1: return {quant::dequantize_q4_1, quant::quantize_q4_1};
        case DType::Q5_0: return {quant::dequantize_q5_0, quant::quantize_q5_0};
        case DType::Q5_1: return {quant::dequantize_q5_1, quant::quantize_q5_1};
        case DType::Q4_K: return {quant::dequantize_q4_K, quant::quantize_q4_K};
        case DType::Q5_K: return {quant::dequantize_q5_K, quant::quantize_q5_K};
        case DType::Q6_K: return {quant::dequantize_q6_K, quant::quantize_q6_K};
        case DType::Q2_K: return {quant::dequantize_q2_K, quant::quantize_q2_K};
        case DType::Q3_K: return {quant::dequantize_q3_K, quant::quantize_q3_K};
        default: break;
    }
    assert(false && "block_codec: not a block format");
    return {nullptr, nullptr};
}

// n values (whole blocks) of a block format.
void decode_quantized(DType dtype, const uint8_t* src, float* dst, size_t n) {
    const size_t bytes = dtype_block_bytes(dtype), values = size_t(dtype_block_values(dtype));
    auto* dequantize = block_codec(dtype).dequantize;
    for (size_t b = 0; b < n / values; ++b) dequantize(src + b * bytes, dst + b * values);
}

void decode_block(DType dtype, const uint8_t* src, float* dst, size_t n) {
    switch (dtype) {
        case DType::Q8_0:
        case DType::Q4_0:
        case DType::Q4_1:
        case DType::Q5_0:
        case DType::Q5_1:
        case DType::Q4_K:
        case DType::Q5_K:
        case DType::Q6_K:
        case DType::Q2_K:
        case DType::Q3_K: return decode_quantized(dtype, src, dst, n);
        case DType::F64: return decode_f64(src, dst, n);
        case DType::F32: std::memcpy(dst, src, n * 4); return;
        case DType::F16: return decode_f16(src, dst, n);
        case DType::BF16: return decode_bf16(src, dst, n);
        case DType::I64: return decode_numbers<int64_t>(src, dst, n);
        case DType::I32: return decode_numbers<int32_t>(src, dst, n);
        case DType::I16: return decode_numbers<int16_t>(src, dst, n);
        case DType::I8: return decode_numbers<int8_t>(src, dst, n);
        case DType::U8: return decode_numbers<uint8_t>(src, dst, n);
        case DType::BOOL: break;
    }
    assert(false && "decode_to_float: BOOL must be rejected by the caller");
}

void encode_block(DType dtype, const float* src, uint8_t* dst, size_t n) {
    switch (dtype) {
        case DType::F32: std::memcpy(dst, src, n * 4); return;
        case DType::F16: return encode_f16(src, dst, n);
        case DType::BF16:
            for (size_t i = 0; i < n; ++i) {
                uint16_t b = float_to_bf16(src[i]);
                std::memcpy(dst + 2 * i, &b, 2);
            }
            return;
        default: break;
    }
    assert(false && "encode_from_float: only F32, F16 and BF16 are written");
}

// Runs block_fn over [0, n) in blocks, on all threads when n is large.
template <typename BlockFn>
void for_blocks(size_t n, BlockFn block_fn) {
    if (n == 0) return;  // an empty tensor's data() may be null, which memcpy must never see
    if (n < kParallelMinElements) {
        block_fn(0, n);
        return;
    }
    const long long blocks = static_cast<long long>((n + kBlockElements - 1) / kBlockElements);
#pragma omp parallel for schedule(static)
    for (long long b = 0; b < blocks; ++b) {
        size_t begin = static_cast<size_t>(b) * kBlockElements;
        size_t count = begin + kBlockElements <= n ? kBlockElements : n - begin;
        block_fn(begin, count);
    }
}

}  // namespace

uint16_t float_to_bf16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // keep NaN a NaN
    uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);  // ties go to the even neighbour
    return static_cast<uint16_t>((x + rounding) >> 16);
}

void decode_to_float(DType dtype, const uint8_t* src, float* dst, size_t n) {
    // kBlockElements is a multiple of 256, so every range but the last holds whole quantized blocks.
    static_assert(kBlockElements % quant::kKBlockValues == 0 && kBlockElements % quant::kBlockValues == 0);
    for_blocks(n, [&](size_t begin, size_t count) {
        decode_block(dtype, src + size_t(dtype_storage_bytes(dtype, int64_t(begin))), dst + begin, count);
    });
}

void quantize_values(DType dtype, const float* src, uint8_t* dst, size_t n) {
    require(is_block_quantized(dtype), ErrorKind::InvalidArgument,
            std::string("quantize_values: ") + dtype_name(dtype) + " is not a block format");
    const size_t values = size_t(dtype_block_values(dtype));
    require(n % values == 0, ErrorKind::InvalidArgument,
            std::string("cannot quantize ") + std::to_string(n) + " values to " + dtype_name(dtype) + ": blocks hold " +
                std::to_string(values) + " values");
    const size_t bytes = dtype_block_bytes(dtype);
    auto* quantize = block_codec(dtype).quantize;
    const long long blocks = static_cast<long long>(n / values);
    long long first_bad = blocks;  // no exception may leave the parallel loop: find the first bad block
#pragma omp parallel for schedule(static) reduction(min : first_bad) if (n >= kParallelMinElements)
    for (long long b = 0; b < blocks; ++b)
        if (!quantize(src + b * values, dst + b * bytes)) first_bad = std::min(first_bad, b);
    if (first_bad == blocks) return;
    for (size_t i = size_t(first_bad) * values; i < size_t(first_bad + 1) * values; ++i)
        require(std::isfinite(src[i]), ErrorKind::InvalidArgument,
                std::string("cannot quantize to ") + dtype_name(dtype) + ": value " + std::to_string(i) + " is " +
                    (std::isnan(src[i]) ? "NaN" : "infinite"));
    fail(ErrorKind::InvalidArgument, std::string("cannot quantize to ") + dtype_name(dtype) + ": the block at value " +
                                         std::to_string(size_t(first_bad) * values) +
                                         " needs a scale beyond fp16's range (65504)");
}

void encode_from_float(DType dtype, const float* src, uint8_t* dst, size_t n) {
    const size_t width = dtype_size(dtype);
    for_blocks(n, [&](size_t begin, size_t count) { encode_block(dtype, src + begin, dst + begin * width, count); });
}

}  // namespace kiln
