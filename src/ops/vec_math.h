// Float transcendental functions written as branch-free arithmetic so that loops calling them
// vectorise (glibc's expf/erff are scalar calls that stop the vectoriser). With GCC the calling file
// must include ops/no_trapping_math.h first, or the selects below keep such loops scalar.
#pragma once
#include <bit>
#include <cstdint>
#include <limits>

namespace kiln::ops::vec {

// e^r for |r| <= 0.35 (after the reduction x = n ln2 + r) by its Taylor series to r^7: the first
// omitted term is < 0.35^8/8! < 6e-9, well under float's 6e-8.
inline float exp_taylor7(float r) {
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    return p * r + 1.0f;
}

// e^x with a relative error of about 2 ulp; 0 below x = -86 (where e^x < 4.5e-38, at the bottom of
// float's normal range), inf above ln(FLT_MAX). NaN propagates.
inline float exp(float x) {
    // Comparisons are false for NaN, so a NaN argument stays NaN through the clamps and selects.
    float xc = x < -86.0f ? -86.0f : x;
    xc = xc > 88.72283f ? 88.72283f : xc;
    // n = round(x / ln2): adding and subtracting 1.5 * 2^23 rounds to nearest (|x / ln2| < 2^22).
    constexpr float kRoundShift = 12582912.0f;
    const float n = (xc * 1.44269504088896341f + kRoundShift) - kRoundShift;
    // r = x - n ln2 in two steps (Cody and Waite): 0.693359375 = 355/512 has few bits, so n * it is
    // exact, and the remainder ln2 - 355/512 carries the rest.
    const float r = (xc - n * 0.693359375f) - n * -2.12194440054690583e-4f;
    const float p = exp_taylor7(r);
    // 2^n as 2^(n-1) * 2, so that n = 128 (x near ln(FLT_MAX)) still has exponent bits: n-1 is in
    // [-125, 127] after the clamps. The multiplication by 2 is exact.
    const float two_n_minus_1 = std::bit_cast<float>((static_cast<int32_t>(n) + 126) << 23);
    float result = p * two_n_minus_1 * 2.0f;
    result = x < -86.0f ? 0.0f : result;
    result = x > 88.72283f ? std::numeric_limits<float>::infinity() : result;
    return result;
}

// e^x for x <= 0 (softmax's x - max), the same series as exp() with the checks that only matter for
// x > 0 left out: 0 below x = -87, NaN propagates; positive x give wrong results.
inline float exp_nonpositive(float x) {
    const float xc = x < -87.0f ? -87.0f : x;
    constexpr float kRoundShift = 12582912.0f;
    const float n = (xc * 1.44269504088896341f + kRoundShift) - kRoundShift;
    const float r = (xc - n * 0.693359375f) - n * -2.12194440054690583e-4f;
    const float p = exp_taylor7(r);
    const float two_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);  // n in [-126, 0]
    return x < -87.0f ? 0.0f : p * two_n;
}

inline float sigmoid(float x) { return 1.0f / (1.0f + vec::exp(-x)); }

// erfc(|z|) by Abramowitz and Stegun 7.1.26 (Handbook of Mathematical Functions, 1964):
// 1 - erf(z) = t (a1 + t (a2 + ...)) e^{-z^2}, t = 1 / (1 + p z), absolute error <= 1.5e-7 for z >= 0.
// Returning the complement keeps the small tail of gelu(x) for x < 0 free of cancellation.
inline float erfc_abs(float z) {
    z = z < 0.0f ? -z : z;  // e^{-z^2} is 0 for z > 9.3, where erfc < 1e-38 anyway
    const float t = 1.0f / (1.0f + 0.3275911f * z);
    float poly = 1.061405429f;
    poly = poly * t - 1.453152027f;
    poly = poly * t + 1.421413741f;
    poly = poly * t - 0.284496736f;
    poly = poly * t + 0.254829592f;
    return poly * t * vec::exp_nonpositive(-z * z);
}

// x * Phi(x) = x (1 + erf(x / sqrt 2)) / 2, PyTorch's gelu(approximate="none").
inline float gelu(float x) {
    const float q = erfc_abs(x * 0.70710678118654752f);  // 1 - erf(|x| / sqrt 2)
    return x * (x >= 0.0f ? 1.0f - 0.5f * q : 0.5f * q);
}

// 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3), written as x * sigmoid(2u), which is the
// same function without the cancellation of 1 + tanh(u) for negative u.
inline float gelu_tanh(float x) {
    const float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
    return x * sigmoid(2.0f * u);
}

}  // namespace kiln::ops::vec
