// 2D convolution as an implicit product, one batch element per workgroup z:
// Y[co, pixel] = sum_k W[co, k] X(k, pixel) (+ bias[co]), k = (ci, ky, kx), where X(k, pixel) is read
// straight from the NCHW input (zero outside it), so no im2col buffer is ever made. With flags & 2 each
// input value is first group-normalised (mean and 1/std per (batch, group) in stats, from
// group_norm_stats.comp), scaled by gamma, shifted by beta and passed through SiLU: ResNet blocks' norm
// and activation fused into the convolution that follows them. Padding stays zero, as after a real norm.
#version 450
#include "common.glsl"
#ifdef DIRECT
layout(local_size_x = 8, local_size_y = 8) in;
#else
layout(local_size_x = 16, local_size_y = 16) in;
#endif
layout(push_constant) uniform Params {
    Ts x;
    Ts w;
    Ts bias;  // read when flags & 1
    Ts y;
    F32s stats;  // [N, groups, 2], read when flags & 2
    Ts gamma;
    Ts beta;
    uint cin, h, wd, cout, oh, ow, ks, stride, pad, groups, flags;
} p;

uint batch;
float load_a(uint m, uint k) { return ld(p.w, m * (p.cin * p.ks * p.ks) + k); }
float load_b(uint k, uint n) {
    const uint taps = p.ks * p.ks, ci = k / taps, tap = k - ci * taps, ky = tap / p.ks, kx = tap - ky * p.ks;
    const uint oy = n / p.ow, ox = n - oy * p.ow;
    const int iy = int(oy * p.stride + ky) - int(p.pad), ix = int(ox * p.stride + kx) - int(p.pad);
    if (iy < 0 || ix < 0 || iy >= int(p.h) || ix >= int(p.wd)) return 0.0;
    float v = ld(p.x, ((batch * p.cin + ci) * p.h + uint(iy)) * p.wd + uint(ix));
    if ((p.flags & 2u) != 0u) {
        const uint s = (batch * p.groups + ci / (p.cin / p.groups)) * 2u;
        v = (v - p.stats.v[s]) * p.stats.v[s + 1u] * ld(p.gamma, ci) + ld(p.beta, ci);
        v = v / (1.0 + exp(-v));
    }
    return v;
}
#if defined(DIRECT)
#include "gemm_direct.glsl"
#elif defined(SMALL)
#include "gemm_tile_small.glsl"
#else
#include "gemm_tile.glsl"
#endif

void main() {
    batch = gl_WorkGroupID.z;
    const uint M = p.cout, N = p.oh * p.ow, K = p.cin * p.ks * p.ks;
    const uint m0 = gl_WorkGroupID.y * TILE, n0 = gl_WorkGroupID.x * TILE;
    float acc[MICRO][MICRO];
    [[unroll]] for (uint i = 0u; i < MICRO; ++i)
        [[unroll]] for (uint j = 0u; j < MICRO; ++j) acc[i][j] = 0.0;
    gemm_tile(m0, n0, M, N, K, true, false, acc);
    [[unroll]] for (uint i = 0u; i < MICRO; ++i) {
        const uint m = m0 + micro_row(i);
        [[unroll]] for (uint j = 0u; j < MICRO; ++j) {
            const uint n = n0 + micro_col(j);
            if (m < M && n < N) {
                float v = acc[i][j];
                if ((p.flags & 1u) != 0u) v += ld(p.bias, m);
                st(p.y, (batch * M + m) * N + n, v);
            }
        }
    }
}
