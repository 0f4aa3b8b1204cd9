// CPU emulations of the float math that torch's CUDA normal sampler executes on an NVIDIA GPU
// (cuRAND's _curand_box_muller: logf, sqrtf and __sincosf), bit-exact so that CUDA seeds reproduce.
#pragma once

namespace kiln {

// CUDA's accurate logf (libdevice __nv_logf without flush-to-zero): a degree-10 polynomial for
// log1p on [-1/3, 1/3] after an exponent split. Correct for every positive finite float.
float cuda_logf(float x);

// __sincosf(x) for x in [0, 2*pi]: FMUL.RZ by 1/(2*pi), then the multi-function unit's MUFU.SIN
// and MUFU.COS. See cuda_float_math.cpp for the model of the hardware table interpolation.
void cuda_sincosf_approx(float x, float* sin_out, float* cos_out);

// The hardware sine and cosine of an angle given in revolutions (t >= 0), as MUFU.SIN/MUFU.COS.
float mufu_sin(float revolutions);
float mufu_cos(float revolutions);

// a*b rounded toward zero (FMUL.RZ).
float mul_round_toward_zero(float a, float b);

}  // namespace kiln
