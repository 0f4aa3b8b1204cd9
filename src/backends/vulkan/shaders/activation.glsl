// The activations of ops::DeviceActivation, in float32.
float erf_approx(float x) {
    // Taylor series near 0 (relative error < 1e-8 for |x| < 0.5), else Abramowitz & Stegun 7.1.26
    // (absolute error < 1.5e-7): enough for GELU, whose error is x/2 times erf's.
    const float a = abs(x);
    if (a < 0.5) {
        const float x2 = x * x;
        return 1.1283791671 * x *
               (1.0 + x2 * (-1.0 / 3.0 + x2 * (0.1 + x2 * (-1.0 / 42.0 + x2 * (1.0 / 216.0 + x2 * (-1.0 / 1320.0 + x2 / 9360.0))))));
    }
    const float t = 1.0 / (1.0 + 0.3275911 * a);
    const float poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    return sign(x) * (1.0 - poly * exp(-a * a));
}

float activation(float x, uint f) {
    if (f == 0u) return x / (1.0 + exp(-x));                     // SiLU
    if (f == 1u) return 0.5 * x * (1.0 + erf_approx(x * 0.70710678118654752));  // GELU (erf)
    if (f == 2u) {                                                 // GELU, tanh approximation
        const float u = clamp(0.7978845608028654 * (x + 0.044715 * x * x * x), -15.0, 15.0);
        return 0.5 * x * (1.0 + tanh(u));
    }
    return x / (1.0 + exp(-1.702 * x));                           // QuickGELU (CLIP)
}
