// diffusers' timestep embedding: out[r, sin_at + i] = sin(t[r] * freq[i]), out[r, cos_at + i] = cos(...),
// i < half, a zero last column when dim is odd. freq is computed on the host in torch's float32 order
// (ops::timestep_embedding); the argument is the float32 product, as there. sin and cos are evaluated here,
// not by the driver's sin/cos, which Vulkan specifies only to 2^-11 absolute on [-pi, pi] while the
// arguments reach 1000 radians: the argument is reduced by multiples of pi/4 in three parts (the first two
// exact in float32 for |x| < 8192) and the remainder fed to minimax polynomials on [-pi/4, pi/4] (the
// coefficients of Cephes' sinf/cosf, peak relative error about 1.2e-7).
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform Params { F32s t; F32s freq; Ts y; uint n, dim, half_dim, sin_at, cos_at; } p;

void sin_cos(float x, out float s, out float c) {
    const float ax = abs(x);
    uint j = uint(ax * 1.27323954473516);  // 4 / pi
    if ((j & 1u) != 0u) j += 1u;
    precise float y = float(j);
    precise float r = ((ax - y * 0.78515625) - y * 2.4187564849853515625e-4) - y * 3.77489497744594108e-8;
    j &= 7u;
    const float z = r * r;
    const float sp = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
    const float cp = ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z -
                     0.5 * z + 1.0;
    const bool swap = j == 1u || j == 2u || j == 5u || j == 6u;
    s = swap ? cp : sp;
    c = swap ? sp : cp;
    if (j > 3u) s = -s;                              // sin(x + pi) = -sin(x)
    if ((j > 3u) != ((j & 3u) > 1u)) c = -c;         // cos changes sign on the 2nd and 3rd quadrants
    if (x < 0.0) s = -s;
}

void main() {
    FOR_EACH_ELEMENT(e, p.n * p.half_dim) {
        const uint r = e / p.half_dim, i = e - r * p.half_dim;
        precise float arg = ld(p.t, r) * ld(p.freq, i);
        float s, c;
        sin_cos(arg, s, c);
        st(p.y, r * p.dim + p.sin_at + i, s);
        st(p.y, r * p.dim + p.cos_at + i, c);
        if (i == 0u && (p.dim & 1u) != 0u) st(p.y, r * p.dim + p.dim - 1u, 0.0);
    }
}
