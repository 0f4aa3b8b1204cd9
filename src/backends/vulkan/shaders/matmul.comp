// C = alpha * A B (+ bias), batched over workgroup z, with every operand addressed by strides (in
// elements): A(m, k) = a[z saz + m sam + k sak], B(k, n) = b[z sbz + k sbk + n sbn], C likewise.
// linear (x W^T), attention's scores (Q K^T) and its weighted sum (P V) are all this kernel.
#version 450
#include "common.glsl"
#ifdef DIRECT
layout(local_size_x = 8, local_size_y = 8) in;
#else
layout(local_size_x = 16, local_size_y = 16) in;
#endif
#ifdef A_F16
#define At F16s
#else
#define At F32s
#endif
#ifdef B_F16
#define Bt F16s
#else
#define Bt F32s
#endif
#ifdef C_F16
#define Ct F16s
#define st_c st_f16
#else
#define Ct F32s
#define st_c st_f32
#endif
layout(push_constant) uniform Params {
    At a;
    Bt b;
    Ct c;
    Ct bias;  // [N], read when flags & 4
    uint M, N, K;
    uint sam, sak, sbk, sbn, scm, scn;
    uint saz, sbz, scz;
    float alpha;
    uint flags;  // 1: A's k is contiguous, 2: B's k is contiguous, 4: add bias[n]
} p;

uint z;
float load_a(uint m, uint k) { return ld(p.a, z * p.saz + m * p.sam + k * p.sak); }
float load_b(uint k, uint n) { return ld(p.b, z * p.sbz + k * p.sbk + n * p.sbn); }
#if defined(DIRECT)
#include "gemm_direct.glsl"
#elif defined(SMALL)
#include "gemm_tile_small.glsl"
#else
#include "gemm_tile.glsl"
#endif

void main() {
    z = gl_WorkGroupID.z;
    const uint m0 = gl_WorkGroupID.y * TILE, n0 = gl_WorkGroupID.x * TILE;
    float acc[MICRO][MICRO];
    [[unroll]] for (uint i = 0u; i < MICRO; ++i)
        [[unroll]] for (uint j = 0u; j < MICRO; ++j) acc[i][j] = 0.0;
    gemm_tile(m0, n0, p.M, p.N, p.K, (p.flags & 1u) != 0u, (p.flags & 2u) != 0u, acc);
    [[unroll]] for (uint i = 0u; i < MICRO; ++i) {
        const uint m = m0 + micro_row(i);
        [[unroll]] for (uint j = 0u; j < MICRO; ++j) {
            const uint n = n0 + micro_col(j);
            if (m < p.M && n < p.N) {
                float v = p.alpha * acc[i][j];
                if ((p.flags & 4u) != 0u) v += ld(p.bias, n);
                st_c(p.c, z * p.scz + m * p.scm + n * p.scn, v);
            }
        }
    }
}
