// The 32-value block formats of GGUF/ggml that kiln reads and writes: q8_0, q4_0, q4_1, q5_0 and q5_1
// (the 256-value k-quants are in quant/k_quants.h).
// Byte layouts (facts from ggml's ggml-common.h and docs/gguf.md; the code is kiln's own):
//   q8_0: fp16 scale d, then 32 int8 codes q[i];                 value = q[i] * d          (34 bytes)
//   q4_0: fp16 scale d, then 16 bytes of 4-bit codes;            value = (q[i] - 8) * d    (18 bytes)
//   q4_1: fp16 scale d, fp16 minimum m, then 16 bytes of codes;  value = q[i] * d + m      (20 bytes)
//   q5_0: fp16 scale d, 4 bytes qh, 16 bytes of low nibbles;    value = (q[i] - 16) * d   (22 bytes)
//   q5_1: fp16 d, fp16 m, 4 bytes qh, 16 bytes of low nibbles;   value = q[i] * d + m      (24 bytes)
// In the 4- and 5-bit formats byte j holds value j in its low nibble and value j + 16 in its high nibble;
// the 5-bit formats keep the fifth bit of value i in bit i of qh (a little-endian uint32).
// All multi-byte fields are little-endian and blocks are read byte by byte, so a block may sit at any
// address (a file's data, a device buffer).
// Quantization follows ggml's reference rules (quantize_row_*_ref), so a file kiln writes has the codes
// stable-diffusion.cpp's converter writes for the same values:
//   q8_0: d = max|x| / 127, q = round-half-away(x / d)
//   q4_0: the value of largest magnitude M (its first occurrence, with its sign), d = M / -8,
//         q = min(15, trunc(x / d + 8.5))
//   q4_1: d = (max - min) / 15, m = min, q = min(15, trunc((x - min) / d + 0.5))
//   q5_0: as q4_0 with d = M / -16 and q = min(31, trunc(x / d + 16.5))
//   q5_1: as q4_1 with d = (max - min) / 31 and q = min(31, trunc((x - min) / d + 0.5))
// where 1/d is taken of the float32 d, before d is rounded to fp16 for storage.
// Header-only and free of exceptions and of the standard library beyond <cstdint> (so is core/half.h), so that device code
// (CUDA/HIP) can include it; quantize_* report non-finite input by returning false (host callers turn that
// into an error: core/dtype_convert.h).
#pragma once
#include <cstdint>

#include "core/half.h"

namespace kiln::quant {

constexpr int kBlockValues = 32;  // values per block, every format
constexpr int kQ8_0Bytes = 2 + 32;
constexpr int kQ4_0Bytes = 2 + 16;
constexpr int kQ4_1Bytes = 2 + 2 + 16;
constexpr int kQ5_0Bytes = 2 + 4 + 16;
constexpr int kQ5_1Bytes = 2 + 2 + 4 + 16;

namespace detail {

KILN_HOST_DEVICE uint16_t load_u16(const uint8_t* p) { return uint16_t(p[0] | (uint32_t(p[1]) << 8)); }
KILN_HOST_DEVICE void store_u16(uint8_t* p, uint16_t v) {
    p[0] = uint8_t(v & 0xffu);
    p[1] = uint8_t(v >> 8);
}

KILN_HOST_DEVICE bool finite(float v) { return (float_bits(v) & 0x7f800000u) != 0x7f800000u; }
KILN_HOST_DEVICE float magnitude(float v) { return v < 0.0f ? -v : v; }
// C's roundf: halfway cases away from zero. |v| <= 127.5 here, so the int conversion cannot overflow.
KILN_HOST_DEVICE int round_half_away(float v) {
    const float t = float(int(v));  // truncation toward zero
    const float frac = v - t;       // exact: v and t share their exponent range
    if (frac >= 0.5f) return int(t) + 1;
    if (frac <= -0.5f) return int(t) - 1;
    return int(t);
}
// min(top, trunc(v)) for v >= 0 (ggml converts to int8 first; v < top + 1.5 here so it never wraps).
KILN_HOST_DEVICE uint8_t clamp_code(float v, int top) {
    const int q = int(v);
    return uint8_t(q < 0 ? 0 : q > top ? top : q);
}
KILN_HOST_DEVICE uint8_t nibble(float v) { return clamp_code(v, 15); }

KILN_HOST_DEVICE uint32_t load_u32(const uint8_t* p) {
    return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}
KILN_HOST_DEVICE void store_u32(uint8_t* p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = uint8_t((v >> (8 * i)) & 0xffu);
}

// The 5-bit codes of a q5 block: low nibbles at qs (16 bytes), fifth bits in qh.
KILN_HOST_DEVICE int code5(const uint8_t* qh, const uint8_t* qs, int i) {
    const uint32_t high = (load_u32(qh) >> i) & 1u;
    const int low = i < 16 ? (qs[i] & 0x0f) : (qs[i - 16] >> 4);
    return low | int(high << 4);
}
KILN_HOST_DEVICE void store_codes5(const uint8_t* q, uint8_t* qh, uint8_t* qs) {
    uint32_t high = 0;
    for (int j = 0; j < 16; ++j) qs[j] = uint8_t((q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
    for (int i = 0; i < 32; ++i) high |= uint32_t(q[i] >> 4) << i;
    store_u32(qh, high);
}

}  // namespace detail

// ---- dequantization: 32 floats from one block ----

KILN_HOST_DEVICE void dequantize_q8_0(const uint8_t* block, float* out) {
    const float d = half_to_float(detail::load_u16(block));
    for (int i = 0; i < 32; ++i) out[i] = float(int8_t(block[2 + i])) * d;  // exact: 8 x 11 bits
}

KILN_HOST_DEVICE void dequantize_q4_0(const uint8_t* block, float* out) {
    const float d = half_to_float(detail::load_u16(block));
    for (int j = 0; j < 16; ++j) {
        const uint8_t b = block[2 + j];
        out[j] = float(int(b & 0x0fu) - 8) * d;
        out[j + 16] = float(int(b >> 4) - 8) * d;
    }
}

KILN_HOST_DEVICE void dequantize_q4_1(const uint8_t* block, float* out) {
    const float d = half_to_float(detail::load_u16(block));
    const float m = half_to_float(detail::load_u16(block + 2));
    for (int j = 0; j < 16; ++j) {
        const uint8_t b = block[4 + j];
        // Two roundings (product, then sum), as ggml's scalar code computes it; the build has
        // -ffp-contract=off so no fused multiply-add changes the bits.
        out[j] = float(b & 0x0fu) * d + m;
        out[j + 16] = float(b >> 4) * d + m;
    }
}

KILN_HOST_DEVICE void dequantize_q5_0(const uint8_t* block, float* out) {
    const float d = half_to_float(detail::load_u16(block));
    for (int i = 0; i < 32; ++i) out[i] = float(detail::code5(block + 2, block + 6, i) - 16) * d;
}

KILN_HOST_DEVICE void dequantize_q5_1(const uint8_t* block, float* out) {
    const float d = half_to_float(detail::load_u16(block));
    const float m = half_to_float(detail::load_u16(block + 2));
    for (int i = 0; i < 32; ++i) out[i] = float(detail::code5(block + 4, block + 8, i)) * d + m;  // two roundings
}

// ---- quantization: one block from 32 floats; false (block untouched) if any value is NaN or infinite ----
// Scales that overflow fp16 (a block whose max |x| / 127 exceeds 65504) are also refused: they would
// store an infinite scale.

KILN_HOST_DEVICE bool quantize_q8_0(const float* x, uint8_t* block) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) {
        if (!detail::finite(x[i])) return false;
        const float a = detail::magnitude(x[i]);
        if (a > amax) amax = a;
    }
    const float d = amax / 127.0f;
    const uint16_t dh = float_to_half(d);
    if ((dh & 0x7c00u) == 0x7c00u) return false;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    detail::store_u16(block, dh);
    for (int i = 0; i < 32; ++i) block[2 + i] = uint8_t(int8_t(detail::round_half_away(x[i] * id)));
    return true;
}

KILN_HOST_DEVICE bool quantize_q4_0(const float* x, uint8_t* block) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < 32; ++i) {
        if (!detail::finite(x[i])) return false;
        const float a = detail::magnitude(x[i]);
        if (a > amax) {  // strictly greater: the first value of largest magnitude keeps its sign
            amax = a;
            max = x[i];
        }
    }
    const float d = max / -8.0f;
    const uint16_t dh = float_to_half(d);
    if ((dh & 0x7c00u) == 0x7c00u) return false;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    detail::store_u16(block, dh);
    for (int j = 0; j < 16; ++j) {
        const uint8_t lo = detail::nibble(x[j] * id + 8.5f);
        const uint8_t hi = detail::nibble(x[j + 16] * id + 8.5f);
        block[2 + j] = uint8_t(lo | (hi << 4));
    }
    return true;
}

KILN_HOST_DEVICE bool quantize_q4_1(const float* x, uint8_t* block) {
    float lo = x[0], hi = x[0];
    for (int i = 0; i < 32; ++i) {
        if (!detail::finite(x[i])) return false;
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
    }
    const float d = (hi - lo) / 15.0f;
    const uint16_t dh = float_to_half(d), mh = float_to_half(lo);
    if ((dh & 0x7c00u) == 0x7c00u || (mh & 0x7c00u) == 0x7c00u || !detail::finite(hi - lo)) return false;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    detail::store_u16(block, dh);
    detail::store_u16(block + 2, mh);
    for (int j = 0; j < 16; ++j) {
        const uint8_t a = detail::nibble((x[j] - lo) * id + 0.5f);
        const uint8_t b = detail::nibble((x[j + 16] - lo) * id + 0.5f);
        block[4 + j] = uint8_t(a | (b << 4));
    }
    return true;
}

KILN_HOST_DEVICE bool quantize_q5_0(const float* x, uint8_t* block) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < 32; ++i) {
        if (!detail::finite(x[i])) return false;
        const float a = detail::magnitude(x[i]);
        if (a > amax) {
            amax = a;
            max = x[i];
        }
    }
    const float d = max / -16.0f;
    const uint16_t dh = float_to_half(d);
    if ((dh & 0x7c00u) == 0x7c00u) return false;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t q[32];
    for (int i = 0; i < 32; ++i) q[i] = detail::clamp_code(x[i] * id + 16.5f, 31);
    detail::store_u16(block, dh);
    detail::store_codes5(q, block + 2, block + 6);
    return true;
}

KILN_HOST_DEVICE bool quantize_q5_1(const float* x, uint8_t* block) {
    float lo = x[0], hi = x[0];
    for (int i = 0; i < 32; ++i) {
        if (!detail::finite(x[i])) return false;
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
    }
    const float d = (hi - lo) / 31.0f;
    const uint16_t dh = float_to_half(d), mh = float_to_half(lo);
    if ((dh & 0x7c00u) == 0x7c00u || (mh & 0x7c00u) == 0x7c00u || !detail::finite(hi - lo)) return false;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t q[32];
    for (int i = 0; i < 32; ++i) q[i] = detail::clamp_code((x[i] - lo) * id + 0.5f, 31);
    detail::store_u16(block, dh);
    detail::store_u16(block + 2, mh);
    detail::store_codes5(q, block + 4, block + 8);
    return true;
}

}  // namespace kiln::quant
