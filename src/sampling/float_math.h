// Elementwise float32 arithmetic for the schedulers, rounded exactly as PyTorch rounds it.
//
// diffusers' step arithmetic is a chain of separate torch ops on float32 tensors, each rounding its
// result to float32. A compiler that fuses a*b+c into one FMA instruction rounds once instead of
// twice and drifts from diffusers by an ulp per step, so floating-point contraction is switched off
// for every function that follows this header. Include it LAST in each sampling source file.
#pragma once
#include <cmath>
#include <cstdint>
#include <utility>

#include "core/tensor.h"
#include "kiln/error.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace kiln {

inline void require_same_shape(const Tensor& a, const Tensor& b, const char* what) {
    require(a.shape() == b.shape(), ErrorKind::InvalidArgument,
            std::string(what) + ": tensors of shapes " + shape_str(a.shape()) + " and " + shape_str(b.shape()) +
                " do not match");
}

// out[i] = f(a[i])
template <class F>
Tensor map_elements(const Tensor& a, F f) {
    Tensor out(a.shape());
    const float* pa = a.data();
    float* po = out.data();
    for (int64_t i = 0, n = a.numel(); i < n; ++i) po[i] = f(pa[i]);
    return out;
}

// out[i] = f(a[i], b[i])
template <class F>
Tensor map_elements(const Tensor& a, const Tensor& b, F f) {
    require_same_shape(a, b, "sampler step");
    Tensor out(a.shape());
    const float* pa = a.data();
    const float* pb = b.data();
    float* po = out.data();
    for (int64_t i = 0, n = a.numel(); i < n; ++i) po[i] = f(pa[i], pb[i]);
    return out;
}

// out[i] = f(a[i], b[i], c[i])
template <class F>
Tensor map_elements(const Tensor& a, const Tensor& b, const Tensor& c, F f) {
    require_same_shape(a, b, "sampler step");
    require_same_shape(a, c, "sampler step");
    Tensor out(a.shape());
    const float* pa = a.data();
    const float* pb = b.data();
    const float* pc = c.data();
    float* po = out.data();
    for (int64_t i = 0, n = a.numel(); i < n; ++i) po[i] = f(pa[i], pb[i], pc[i]);
    return out;
}

// torch's `x ** 0.5` on float32 is a correctly rounded square root; so is sqrtf.
inline float sqrt_f32(float x) { return __builtin_sqrtf(x); }

// The forward process at a cumulative alpha: sqrt(a) x + sqrt(1 - a) noise, as the alpha-based
// schedulers' add_noise computes it (DDIM, PNDM, LCM).
inline Tensor noised_at_alpha(const Tensor& original, const Tensor& noise, float alpha_cumprod) {
    const float sa = sqrt_f32(alpha_cumprod);
    const float sb = sqrt_f32(1.0f - alpha_cumprod);
    return map_elements(original, noise, [=](float x, float e) { return sa * x + sb * e; });
}

// One-value transcendental functions, correctly rounded from double.
inline float log_f(float x) { return static_cast<float>(std::log(static_cast<double>(x))); }
inline float exp_f(float x) { return static_cast<float>(std::exp(static_cast<double>(x))); }
inline float expm1_f(float x) { return static_cast<float>(std::expm1(static_cast<double>(x))); }

// alpha_t, sigma_t and lambda_t = log(alpha_t / sigma_t) of a Karras-style sigma, in the float32
// 0-dim tensor arithmetic of diffusers' multistep solvers (DPM-Solver++, UniPC).
struct SigmaPoint {
    float alpha;
    float sigma;
    float lambda;
};
inline SigmaPoint sigma_point(float sigma) {
    const float alpha = 1.0f / sqrt_f32(sigma * sigma + 1.0f);
    const float s = sigma * alpha;
    return {alpha, s, log_f(alpha) - log_f(s)};
}

}  // namespace kiln
