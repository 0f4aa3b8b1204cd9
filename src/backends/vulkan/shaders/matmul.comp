// C = alpha * A B (+ bias), batched over workgroup z, with every operand addressed by strides (in
// elements): A(m, k) = a[z saz + m sam + k sak], B(k, n) = b[z sbz + k sbk + n sbn], C likewise.
// linear (x W^T), attention's scores (Q K^T) and its weighted sum (P V) are all this kernel. The product's
// build (tiles, direct reads or matrix units) is chosen by gemm_build.glsl.
#version 450
#include "common.glsl"
#ifdef DIRECT
layout(local_size_x = 8, local_size_y = 8) in;
#elif defined(COOP_WIDE)
layout(local_size_x = 16, local_size_y = 32) in;  // gemm_coop.glsl's 128x128 tiles of 32x32 blocks: 16 subgroups
#else
layout(local_size_x = 16, local_size_y = 16) in;
#endif
#ifdef A_F16
#define At F16s
#else
#define At F32s
#endif
#ifdef B_Q8
// B is a q8_0 weight read as blocks (blocks.glsl): each value decoded as the tiles load it, no transient copy.
#include "blocks.glsl"
#define Bt U32s
#elif defined(B_F16)
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
    F32s ws;  // split-K partial sums [batch, slices, M, N], when slices > 1
    uint M, N, K;
    uint sam, sak, sbk, sbn, scm, scn;
    uint saz, sbz, scz;
    float alpha;
    uint flags;  // 1: A's k is contiguous, 2: B's k is contiguous, 4: add bias[n], 8 / 16: see load_a8,
                 // 32: the split-K pass that adds the slices, 64: C += the result (linear_add_: the old value
                 // added in float32 before the one rounding)
    uint slices, kslice;  // split-K: slices of kslice k each (1: none)
} p;

uint z, slice;  // the batch entry and slice of k of this workgroup
float load_a(uint m, uint k) { return ld(p.a, z * p.saz + m * p.sam + k * p.sak); }
#ifdef B_Q8
float load_b(uint k, uint n) { return q8_0_value(p.b, z * p.sbz + k * p.sbk + n * p.sbn); }
#else
float load_b(uint k, uint n) { return ld(p.b, z * p.sbz + k * p.sbk + n * p.sbn); }
#endif
void store_c(uint m, uint n, float sum) {
    if (p.slices > 1u && (p.flags & 32u) == 0u) {
        p.ws.v[((z * p.slices + slice) * p.M + m) * p.N + n] = sum;
        return;
    }
    float v = p.alpha * sum;
    if ((p.flags & 4u) != 0u) v += ld(p.bias, n);
    const uint at = z * p.scz + m * p.scm + n * p.scn;
    if ((p.flags & 64u) != 0u) v = ld(p.c, at) + v;
    st_c(p.c, at, v);
}
float partial(uint m, uint n, uint s) { return p.ws.v[((z * p.slices + s) * p.M + m) * p.N + n]; }
#if defined(COOP)
// 16-byte loads of 8 float16 values for the matrix-unit build, where the host found them aligned: A's k
// contiguous (flags & 8), B's k or n contiguous (flags & 16), all strides multiples of 8 elements.
layout(buffer_reference, std430, buffer_reference_align = 16) buffer U128s { uvec4 v[]; };
#define HAS_LOAD8
bool load_a8(uint m, uint k, inout uvec4 v) {
#ifdef A_F16
    if ((p.flags & 8u) == 0u || m >= p.M || k + 8u > p.K) return false;
    v = U128s(p.a).v[(z * p.saz + m * p.sam + k) >> 3];
    return true;
#else
    return false;
#endif
}
bool load_b8(uint k, uint n, bool k_fast, inout uvec4 v) {
#ifdef B_Q8
    // A q8_0 weight: 8 values along k decoded from their block, where they start at a multiple of 8 (flags & 16).
    if ((p.flags & 16u) == 0u || !k_fast || n >= p.N || k + 8u > p.K) return false;
    v = q8_0_pack8(p.b, z * p.sbz + k * p.sbk + n * p.sbn);
#else
    if ((p.flags & 16u) == 0u || (k_fast ? (n >= p.N || k + 8u > p.K) : (k >= p.K || n + 8u > p.N))) return false;
    v = U128s(p.b).v[(z * p.sbz + k * p.sbk + n * p.sbn) >> 3];
#endif
    return true;
}
#endif
#include "gemm_build.glsl"

void main() {
    const uint m0 = gl_WorkGroupID.y * TILE_M, n0 = gl_WorkGroupID.x * TILE_N, slices = max(p.slices, 1u);
    if ((p.flags & 32u) != 0u) {
        z = gl_WorkGroupID.z;
        sum_slices(m0, n0, p.M, p.N, slices);
        return;
    }
    z = gl_WorkGroupID.z / slices;
    slice = gl_WorkGroupID.z % slices;
    const uint k_begin = slice * p.kslice, k_end = slices > 1u ? min(p.K, k_begin + p.kslice) : p.K;
    gemm(m0, n0, p.M, p.N, k_begin, k_end, (p.flags & 1u) != 0u, (p.flags & 2u) != 0u);
}
