// IEEE half and bfloat16 conversions (exact, round-to-nearest-even on the way down). Header-only and free of
// the standard library beyond <cstdint>, so that device code (CUDA/HIP: the block formats of
// quant/block_formats.h) can call them too.
#pragma once
#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define KILN_HOST_DEVICE __host__ __device__ inline
#else
#define KILN_HOST_DEVICE inline
#endif

namespace kiln {

KILN_HOST_DEVICE uint32_t float_bits(float f) {
    union {
        float f;
        uint32_t u;
    } v{f};
    return v.u;
}

KILN_HOST_DEVICE float bits_float(uint32_t u) {
    union {
        uint32_t u;
        float f;
    } v{u};
    return v.f;
}

KILN_HOST_DEVICE float half_to_float(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0x1fu) return bits_float(sign | 0x7f800000u | (mant << 13));
    if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
    // Zero or subnormal: mant * 2^-24 is exact in float32.
    const float magnitude = float(mant) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
}

// Overflow gives infinity; NaN gives the one quiet NaN.
KILN_HOST_DEVICE uint16_t float_to_half(float f) {
    const uint32_t x = float_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const int32_t exp = int32_t((x >> 23) & 0xffu) - 127 + 15;
    uint32_t mant = x & 0x7fffffu;
    if (((x >> 23) & 0xffu) == 0xffu) return uint16_t(sign | 0x7c00u | (mant ? 0x200u : 0u));
    if (exp >= 31) return uint16_t(sign | 0x7c00u);
    if (exp <= 0) {
        if (exp < -10) return uint16_t(sign);
        mant |= 0x800000u;
        const uint32_t shift = uint32_t(14 - exp);
        uint32_t h = mant >> shift;
        const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (h & 1u))) ++h;
        return uint16_t(sign | h);
    }
    uint32_t h = sign | (uint32_t(exp) << 10) | (mant >> 13);
    const uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is correct rounding
    return uint16_t(h);
}

KILN_HOST_DEVICE float bf16_to_float(uint16_t b) { return bits_float(uint32_t(b) << 16); }

}  // namespace kiln
