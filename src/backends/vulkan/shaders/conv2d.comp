// 2D convolution as an implicit product, one batch element per workgroup z:
// Y[co, pixel] = sum_k W[co, k] X(k, pixel) (+ bias[co]), k = (ci, ky, kx), where X(k, pixel) is read
// straight from the NCHW input (zero outside it), so no im2col buffer is ever made. With flags & 2 each
// input value is first group-normalised (mean and 1/std per (batch, group) in stats, from
// group_norm_stats.comp), scaled by gamma, shifted by beta and passed through SiLU: ResNet blocks' norm
// and activation fused into the convolution that follows them. Padding stays zero, as after a real norm.
// With flags & 32 the input is x's nearest-2x upsampling, read through the index arithmetic (h and wd are the
// upsampled size): the 4x tensor is never made. The epilogue may add the output's old value (flags & 64: y +=
// the convolution) and a per-channel term bias2[batch * bias2_stride + m] (flags & 128: a shortcut's bias with
// stride 0, a time embedding's columns with the row width), in float32 before the one rounding to y's type.
// With flags & 512 (the tiled builds) the input was written out as columns first (conv_columns.comp: the
// index arithmetic and GroupNorm paid once a value, not once a tile that reads it): x is then that buffer,
// cin x ks x ks rows of wd values, for the pixels h .. h + wd - 1 of the whole batch counted as one row of
// N x oh x ow (the columns of one chunk).
#version 450
#include "common.glsl"
#extension GL_EXT_control_flow_attributes : require
#ifdef DIRECT
layout(local_size_x = 8, local_size_y = 8) in;
#elif defined(COOP_WIDE)
layout(local_size_x = 16, local_size_y = 32) in;  // gemm_coop.glsl's 128x128 tiles of 32x32 blocks: 16 subgroups
#else
layout(local_size_x = 16, local_size_y = 16) in;
#endif
#ifdef W_Q8
// The filter is a q8_0 weight read as blocks (blocks.glsl): each value decoded as the tiles load it.
#include "blocks.glsl"
#define Wt U32s
#else
#define Wt Ts
#endif
layout(push_constant) uniform Params {
    Ts x;
    Wt w;
    Ts bias;  // read when flags & 1
    Ts y;
    F32s stats;  // [N, groups, 2], read when flags & 2
    Ts gamma;
    Ts beta;
    F32s ws;  // split-K partial sums [N, slices, cout, oh * ow], when slices > 1
    Ts bias2;  // read when flags & 128
    uint cin, h, wd, cout, oh, ow, ks, stride, pad, groups;
    // 1: bias, 2: GroupNorm + SiLU, 4 / 8 / 256: see load_a8, 16: the split-K pass that adds the slices, 32: x
    // upsampled 2x, 64: y += the result, 128: + bias2, 512: x is columns (above; h and wd then say which)
    uint flags;
    uint slices, kslice;  // split-K: slices of kslice k each (1: none)
    uint bias2_stride;    // bias2's values per batch entry (0: one row for all)
} p;

uint batch, slice;  // the batch entry and slice of k of this workgroup
#ifdef W_Q8
float load_a(uint m, uint k) { return q8_0_value(p.w, m * (p.cin * p.ks * p.ks) + k); }
#else
float load_a(uint m, uint k) { return ld(p.w, m * (p.cin * p.ks * p.ks) + k); }
#endif
#include "conv_input.glsl"
bool columns() { return (p.flags & 512u) != 0u; }
float load_b(uint k, uint n) {
    if (columns()) return ld(p.x, k * p.wd + n);
    const RowRead r = row_read(k, n);
    return row_value(r, norm_terms(r), 0u);
}
#if !defined(COOP) && !defined(DIRECT) && !defined(SMALL)
// The 128x128 FMA tiles' 4 values along n at once (gemm_tile.glsl), false where they are not in one row.
#define HAS_LOAD_B4
bool load_b4(uint k, uint n, inout vec4 v) {
    if (columns()) {  // wd is a multiple of 8, n of 4: aligned
        if (k >= p.cin * p.ks * p.ks || n + 4u > p.wd) return false;
#ifdef T_F16
        v = ld4_f16(p.x, k * p.wd + n);
#else
        v = ld4_f32(p.x, k * p.wd + n);
#endif
        return true;
    }
    if ((p.flags & 256u) == 0u || k >= p.cin * p.ks * p.ks || n + 4u > p.oh * p.ow) return false;
    const RowRead r = row_read(k, n);
    const vec4 norm = norm_terms(r);
    v = vec4(row_value(r, norm, 0u), row_value(r, norm, 1u), row_value(r, norm, 2u), row_value(r, norm, 3u));
    return true;
}
#endif
// Pixels a workgroup's product spans: one image's, or one chunk of columns.
uint product_pixels() { return columns() ? p.wd : p.oh * p.ow; }
void store_c(uint m, uint n, float sum) {
    if (p.slices > 1u && (p.flags & 16u) == 0u) {
        p.ws.v[((batch * p.slices + slice) * p.cout + m) * product_pixels() + n] = sum;
        return;
    }
    uint image = batch;
    if (columns()) {  // the chunk's pixel n is pixel h + n of the batch
        image = quotient(p.h + n, p.oh * p.ow);
        n = p.h + n - image * (p.oh * p.ow);
    }
    if ((p.flags & 1u) != 0u) sum += ld(p.bias, m);
    const uint at = (image * p.cout + m) * (p.oh * p.ow) + n;
    if ((p.flags & (64u | 128u)) != 0u) {  // (y + bias2) + sum: the composition's order, without its roundings
        float extra = (p.flags & 64u) != 0u ? ld(p.y, at) : 0.0;
        if ((p.flags & 128u) != 0u) extra += ld(p.bias2, image * p.bias2_stride + m);
        sum = extra + sum;
    }
    st(p.y, at, sum);
}
float partial(uint m, uint n, uint s) { return p.ws.v[((batch * p.slices + s) * p.cout + m) * product_pixels() + n]; }
#if defined(COOP)
// 16-byte loads of 8 float16 values for the matrix-unit build, where the host found them aligned: weights
// along k (flags & 4), and the input along pixels for a plain 1x1 convolution (flags & 8); or 8 input values
// along pixels computed together (flags & 256, below).
layout(buffer_reference, std430, buffer_reference_align = 16) buffer U128s { uvec4 v[]; };
#define HAS_LOAD8
bool load_a8(uint m, uint k, inout uvec4 v) {
    const uint K = p.cin * p.ks * p.ks;
    if ((p.flags & 4u) == 0u || m >= p.cout || k + 8u > K) return false;
#ifdef W_Q8
    v = q8_0_pack8(p.w, m * K + k);  // a q8_0 filter: 8 values decoded from their block (K a multiple of 8)
#else
    v = U128s(p.w).v[(m * K + k) >> 3];
#endif
    return true;
}
uvec4 pack8(float v[8]);  // gemm_coop.glsl
bool load_b8(uint k, uint n, bool k_fast, inout uvec4 v) {
    if (columns()) {  // wd is a multiple of 8 (VulkanDeviceOps::conv)
        if (k >= p.cin * p.ks * p.ks || n + 8u > p.wd) return false;
        v = U128s(p.x).v[(k * p.wd + n) >> 3];
        return true;
    }
    if (k >= p.cin * p.ks * p.ks || n + 8u > p.oh * p.ow) return false;
    if ((p.flags & 8u) != 0u) {
        v = U128s(p.x).v[((batch * p.cin + k) * p.h * p.wd + n) >> 3];
        return true;
    }
    if ((p.flags & 256u) == 0u) return false;
    const RowRead r = row_read(k, n);
    const vec4 norm = norm_terms(r);
    float x[8];
    [[unroll]] for (uint i = 0u; i < 8u; ++i) x[i] = row_value(r, norm, i);
    v = pack8(x);
    return true;
}
#endif
#include "gemm_build.glsl"

void main() {
    const uint m0 = gl_WorkGroupID.y * TILE_M, n0 = gl_WorkGroupID.x * TILE_N, slices = max(p.slices, 1u);
    const uint M = p.cout, N = product_pixels(), K = p.cin * p.ks * p.ks;
    if ((p.flags & 16u) != 0u) {
        batch = columns() ? 0u : gl_WorkGroupID.z;
        sum_slices(m0, n0, M, N, slices);
        return;
    }
    batch = columns() ? 0u : gl_WorkGroupID.z / slices;
    slice = gl_WorkGroupID.z % slices;
    const uint k_begin = slice * p.kslice, k_end = slices > 1u ? min(K, k_begin + p.kslice) : K;
    gemm(m0, n0, M, N, k_begin, k_end, true, false);
}
