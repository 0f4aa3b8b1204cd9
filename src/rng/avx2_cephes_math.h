// Scalar, bit-exact emulations of the float log and sincos that torch's CPU normal sampler uses on
// x86-64 (ATen's avx_mathfun.h: Cephes polynomials, 8 lanes at a time in normal_fill_16_AVX2).
// torch's release builds compile that code with GCC, -mavx2 -mfma and GCC's default
// -ffp-contract=fast, so every multiply whose only use is an add became one fused multiply-add;
// these functions reproduce that instruction sequence lane by lane (verified bit-exactly against
// torch 2.11 outputs in tests/data/rng). torch never dispatches normal_fill to AVX-512.
#pragma once

namespace kiln {

// Natural log for x in (0, 1] (the Box-Muller radius input; the fill never passes 0 or negatives).
float avx2_cephes_log(float x);

// sin and cos for x in [0, 2*pi) (the Box-Muller angle).
void avx2_cephes_sincos(float x, float* sin_out, float* cos_out);

}  // namespace kiln
