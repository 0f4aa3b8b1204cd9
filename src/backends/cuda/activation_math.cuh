// The activation functions in float, for the kernels that apply them (activations.cu, group_norm.cu,
// im2col.cu). The library's precise functions (expf, erfcf: a few ulp, no fast-math) in forms that
// cancel nowhere: sigmoid as x / (1 + e^-x), GELU through erfc so that its tail for x < 0 keeps its
// digits, and the tanh GELU as x * sigmoid(2u), which equals 0.5 x (1 + tanh(u)). Where e^-x overflows the
// quotient is the correctly signed zero.
#pragma once
#include "backends/cuda/gpu_runtime.h"

namespace kiln::cuda::detail {

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

// x * Phi(x) = 0.5 x erfc(-x / sqrt 2): torch's gelu(approximate="none").
__device__ __forceinline__ float gelu(float x) { return 0.5f * x * erfcf(x * -0.70710678118654752f); }

// torch's gelu(approximate="tanh"): u = sqrt(2/pi) (x + 0.044715 x^3).
__device__ __forceinline__ float gelu_tanh(float x) {
    const float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
    return x / (1.0f + expf(-2.0f * u));
}

// OpenAI CLIP's x * sigmoid(1.702 x).
__device__ __forceinline__ float quick_gelu(float x) { return x / (1.0f + expf(-1.702f * x)); }

}  // namespace kiln::cuda::detail
