// Attention without a score matrix in memory (the "flash" form): out = softmax(scale Q K^T) V for one head
// of one batch entry per workgroup column, 64 RG queries per workgroup. Keys are taken 64 at a time; each tile's
// scores live in registers, the running row maxima and sums rescale the output as a larger maximum arrives,
// and the probabilities pass through shared memory into the product with V. Float32 arithmetic throughout,
// plain FMAs (so it runs on GPUs without matrix units, the RX 580 among them), shared memory for every
// reduction (no subgroup operations: common.glsl says why).
//
// Q(i, c) = q[b lq sq + i sq + h d + c], K and V likewise with lk rows and their own row strides, so the
// packed q|k|v of self-attention and k|v of cross-attention are read in place. COLS (1-16) is how many output
// columns a thread owns: a build covers heads of up to 16 COLS dimensions, and the host takes the smallest that
// does, so a head of 40, 80 or 160 dimensions computes 48, 80 or 160 columns (whole 64-column chunks, before
// session 24, computed 64, 128 and 192).
//
// 256 threads: ty = t / 16 owns rows 64 g + 4 ty .. + 3 of the query block for each of its RG row groups g (RG 1
// or 2), tx = t % 16 owns keys tx + 16 j of each key tile (j = 0..3; interleaved so the probabilities' stores spread
// over the banks) and output columns tx + 16 i (i < COLS; interleaved so that a row of V in shared memory is read
// by 16 threads from 16 banks). Two row groups a thread (session 22) give each shared-memory read of K or V twice
// the multiply-adds and halve the barriers a query meets, but hold twice the registers and make half the
// workgroups: the host takes them for heads of up to 64 dimensions on large grids (VulkanDeviceOps::flash_attention).
// Operands are read 4 values at a time where the host found them aligned (p.loads).
#version 450
#include "common.glsl"
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 256) in;
layout(push_constant) uniform Params {
    Ts q;
    Ts k;
    Ts v;
    Ts o;
    uint lq, lk, d, causal;
    uint sq, sk, sv, so;  // row strides, in elements
    float scale;
    uint loads;  // values one load may take: 4 or 8 where every head's rows start aligned for them, else 1
} p;

#ifndef RG
#define RG 1u  // row groups of 64 queries a workgroup
#endif
#ifndef COLS
#define COLS 4u  // output columns a thread owns
#endif
#define BR (64u * RG)  // queries per workgroup
#define D_MAX (16u * COLS)  // head dimensions a build covers
// Keys of V a step of the output's product: VK rows of D_MAX columns fill at most 2048 floats (8 KiB).
#define VK (COLS <= 4u ? 32u : COLS <= 8u ? 16u : 8u)
#define BC 64u   // keys per tile
// Head dimensions per step of the scores' product: with two row groups, heads of up to 48 (SD 1.5's first level, 40)
// in one step, two barriers a key tile fewer than two steps of 32 (session 25, H200: 4096x4096 d40 2.31 -> 2.22 ms;
// with one row group the same step was 20% slower, so it keeps steps of 32).
#define DK (COLS == 3u && RG == 2u ? 48u : 32u)
#define Q_ROW (16u * RG)      // vec4 per column of Q^T (BR / 4)
#define P_ROW (16u * RG + 1u)  // vec4 per key row of the probabilities (BR / 4, + 1 of padding against bank conflicts)

// Columns col .. col + 3 of a row (zeros past d and past the operand's rows): one load where p.loads allows.
vec4 ld4_row(Ts t, uint at, bool in_rows, uint col) {
    if (!in_rows || col >= p.d) return vec4(0.0);
    if (p.loads >= 4u) {
#ifdef T_F16
        return ld4_f16(t, at);
#else
        return ld4_f32(t, at);
#endif
    }
    vec4 x = vec4(0.0);
    [[unroll]] for (uint c = 0u; c < 4u; ++c)
        if (col + c < p.d) x[c] = ld(t, at + c);
    return x;
}

// One shared array, used in three phases of each key tile (RG 1 / 2: 1088 / 2112 vec4, 2304 with two row groups for
// heads of up to 48, and shv's at most 2048 floats beside it: VulkanDeviceOps::flash_attention):
//   scores:  [0, SH_K) Q^T, [c][row / 4] (4 rows of column c per vec4); [SH_K, SH_QK) K^T, [c][key % 16] (keys
//            key % 16 + 16 j as component j);
//   softmax: [0, 4 BR) the row reductions' partial values (row_reduce);
//   output:  [0, SH_V) probabilities^T, [key][row / 4], P_ROW per key; shv: VK rows of V, D_MAX floats each.
#define SH_K (DK * Q_ROW)
#define SH_QK (SH_K + DK * 16u)
#define SH_V (BC * P_ROW)
shared vec4 sh[SH_QK > SH_V ? SH_QK : SH_V];
shared float shv[VK * D_MAX];

// The maximum (max_not_sum) or sum over a row group's 16 threads of each of this thread's 4 RG rows (x[g][r]: row
// 64 g + 4 ty + r). The caller's barrier before it ends the phase that used sh.
void row_reduce(inout vec4 x[RG], uint ty, uint tx, bool max_not_sum) {
    [[unroll]] for (uint g = 0u; g < RG; ++g)
        [[unroll]] for (uint r = 0u; r < 4u; ++r) sh[(64u * g + 4u * ty + r) * 4u + (tx >> 2)][tx & 3u] = x[g][r];
    barrier();
    [[unroll]] for (uint g = 0u; g < RG; ++g)
        [[unroll]] for (uint r = 0u; r < 4u; ++r) {
            const uint row = (64u * g + 4u * ty + r) * 4u;
            const vec4 a = sh[row], b = sh[row + 1u], c = sh[row + 2u], d = sh[row + 3u];
            if (max_not_sum) {
                const vec4 m = max(max(a, b), max(c, d));
                x[g][r] = max(max(m.x, m.y), max(m.z, m.w));
            } else {
                const vec4 t = (a + b) + (c + d);
                x[g][r] = (t.x + t.y) + (t.z + t.w);
            }
        }
    barrier();
}

void main() {
    const uint t = gl_LocalInvocationIndex, ty = t >> 4, tx = t & 15u;
    const uint q0 = gl_WorkGroupID.x * BR, h = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
    const uint qb = b * p.lq * p.sq + h * p.d, kb = b * p.lk * p.sk + h * p.d, vb = b * p.lk * p.sv + h * p.d;
    const uint ob = b * p.lq * p.so + h * p.d;
    // Keys past the last query of the block are all masked when causal: their tiles are skipped.
    const uint keys = p.causal != 0u ? min(p.lk, q0 + BR) : p.lk;

    vec4 row_max[RG], row_sum[RG];
    vec4 acc[RG][COLS];  // acc[g][i][r]: row 64 g + 4 ty + r, column tx + 16 i
    [[unroll]] for (uint g = 0u; g < RG; ++g) {
        row_max[g] = vec4(-3.402823466e38), row_sum[g] = vec4(0.0);
        [[unroll]] for (uint i = 0u; i < COLS; ++i) acc[g][i] = vec4(0.0);
    }

    for (uint j0 = 0u; j0 < keys; j0 += BC) {
        // Scores of this thread's 4 RG rows x 4 keys, over the head dimension DK at a time.
        vec4 s[RG][4];
        [[unroll]] for (uint g = 0u; g < RG; ++g)
            [[unroll]] for (uint r = 0u; r < 4u; ++r) s[g][r] = vec4(0.0);
        for (uint c0 = 0u; c0 < p.d; c0 += DK) {
            // BR rows x DK columns of Q and 64 rows x DK columns of K: each thread reads 4 columns of one row, DK RG / 16
            // times for Q and DK / 16 times for K; consecutive threads take consecutive rows, so the transposed stores
            // hit distinct banks.
            [[unroll]] for (uint i = 0u; i < DK * RG / 16u; ++i) {
                const uint e = t + 256u * i, row = e % BR, cg = e / BR * 4u, qi = q0 + row, col = c0 + cg;
                const vec4 qx = ld4_row(p.q, qb + qi * p.sq + col, qi < p.lq, col);
                [[unroll]] for (uint c = 0u; c < 4u; ++c) sh[(cg + c) * Q_ROW + (row >> 2)][row & 3u] = qx[c];
            }
            [[unroll]] for (uint i = 0u; i < DK / 16u; ++i) {
                const uint e = t + 256u * i, row = e & 63u, cg = (e >> 6) * 4u, kj = j0 + row, col = c0 + cg;
                const vec4 kx = ld4_row(p.k, kb + kj * p.sk + col, kj < p.lk, col);
                [[unroll]] for (uint c = 0u; c < 4u; ++c) sh[SH_K + (cg + c) * 16u + (row & 15u)][row >> 4] = kx[c];
            }
            barrier();
            // Columns past d were stored as zeros: whole groups of 8, unrolled (the loads' latency overlaps).
            const uint cn = min(DK, p.d - c0);
            for (uint c8 = 0u; c8 < cn; c8 += 8u)
                [[unroll]] for (uint c = c8; c < c8 + 8u; ++c) {
                    const vec4 kv = sh[SH_K + c * 16u + tx];
                    [[unroll]] for (uint g = 0u; g < RG; ++g) {
                        const vec4 qv = sh[c * Q_ROW + 16u * g + ty];
                        [[unroll]] for (uint r = 0u; r < 4u; ++r) s[g][r] += qv[r] * kv;
                    }
                }
            barrier();
        }

        // Scale, mask (keys past lk; with causal, keys after the query), and the online softmax update.
        vec4 m[RG];
        [[unroll]] for (uint g = 0u; g < RG; ++g) {
            m[g] = vec4(-3.402823466e38);
            [[unroll]] for (uint r = 0u; r < 4u; ++r) {
                const uint qi = q0 + 64u * g + 4u * ty + r;
                [[unroll]] for (uint j = 0u; j < 4u; ++j) {
                    const uint kj = j0 + tx + 16u * j;
                    const bool masked = kj >= p.lk || (p.causal != 0u && kj > qi);
                    s[g][r][j] = masked ? -3.402823466e38 : p.scale * s[g][r][j];
                    m[g][r] = max(m[g][r], s[g][r][j]);
                }
            }
        }
        row_reduce(m, ty, tx, true);
        // Each thread sums its own keys' probabilities (relative to the row's common maximum, so rescaled alike):
        // the row's sum is reduced once, after the last tile, not once a tile (session 24: two barriers a tile).
        vec4 rescale[RG];
        [[unroll]] for (uint g = 0u; g < RG; ++g) {
            const vec4 new_max = max(row_max[g], m[g]);
            rescale[g] = exp(row_max[g] - new_max);
            row_max[g] = new_max;
            vec4 tile_sum = vec4(0.0);
            [[unroll]] for (uint r = 0u; r < 4u; ++r)
                [[unroll]] for (uint j = 0u; j < 4u; ++j) {
                    s[g][r][j] = s[g][r][j] > -3.0e38 ? exp(s[g][r][j] - new_max[r]) : 0.0;
                    tile_sum[r] += s[g][r][j];
                }
            row_sum[g] = row_sum[g] * rescale[g] + tile_sum;
            [[unroll]] for (uint i = 0u; i < COLS; ++i) acc[g][i] *= rescale[g];
            // The probabilities, transposed: key tx + 16 j's 4 rows of row group (g, ty) as one vec4.
            [[unroll]] for (uint j = 0u; j < 4u; ++j)
                sh[(tx + 16u * j) * P_ROW + 16u * g + ty] = vec4(s[g][0][j], s[g][1][j], s[g][2][j], s[g][3][j]);
        }

        // out += P V, VK keys at a time.
        const uint kn = min(BC, keys - j0);
        for (uint k0 = 0u; k0 < kn; k0 += VK) {
            barrier();  // the probabilities are stored; the previous step's V is read
            // VK rows of D_MAX columns of V, 4 values a thread and a load, at most twice.
            [[unroll]] for (uint i = 0u; i < (VK * D_MAX / 4u + 255u) / 256u; ++i) {
                const uint e = t + 256u * i, key = e / (D_MAX / 4u), col = e % (D_MAX / 4u) * 4u, kj = j0 + k0 + key;
                if (e >= VK * D_MAX / 4u) break;
                const vec4 x = ld4_row(p.v, vb + kj * p.sv + col, kj < p.lk, col);
                [[unroll]] for (uint c = 0u; c < 4u; ++c) shv[key * D_MAX + col + c] = x[c];
            }
            barrier();
            // Keys past kn have probability 0 and V rows of zeros: whole groups of 8, unrolled.
            const uint n = min(VK, kn - k0);
            for (uint k8 = 0u; k8 < n; k8 += 8u)
                [[unroll]] for (uint key = k8; key < k8 + 8u; ++key) {
                    float vv[COLS];
                    [[unroll]] for (uint i = 0u; i < COLS; ++i) vv[i] = shv[key * D_MAX + tx + 16u * i];
                    [[unroll]] for (uint g = 0u; g < RG; ++g) {
                        const vec4 pg = sh[(k0 + key) * P_ROW + 16u * g + ty];
                        [[unroll]] for (uint i = 0u; i < COLS; ++i) acc[g][i] += pg * vv[i];
                    }
                }
        }
        barrier();  // before the next tile's Q and K overwrite the probabilities
    }

    row_reduce(row_sum, ty, tx, false);
    [[unroll]] for (uint g = 0u; g < RG; ++g)
        [[unroll]] for (uint r = 0u; r < 4u; ++r) {
            const uint qi = q0 + 64u * g + 4u * ty + r;
            if (qi >= p.lq) continue;
            const float inv = 1.0 / row_sum[g][r];
            [[unroll]] for (uint i = 0u; i < COLS; ++i) {
                const uint col = tx + 16u * i;
                if (col < p.d) st(p.o, ob + qi * p.so + col, acc[g][i][r] * inv);
            }
        }
}
