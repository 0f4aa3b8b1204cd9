// Attention without a score matrix in memory, on the matrix units (VK_KHR_cooperative_matrix): out = softmax(scale
// Q K^T) V for 64 queries of one head of one batch entry per workgroup, float16 tensors only. The same interface as
// flash_attention.comp (its push constants), which stays the kernel of GPUs without matrix units.
//
// 128 threads: 4 subgroups of 32 (the pipeline asks for 32), each owning 16 of the block's queries from start to
// end, so within a key block a subgroup synchronises only with itself. Per block of BC (32) keys:
//   1. K and V (BC x DP, float16) into shared memory, by the whole workgroup, from registers that fetched them
//      during the previous block;
//   2. each subgroup: its 16 x 16 scores for each 16-key tile on the matrix units (Q held in registers as D_TILES A
//      matrices for the whole kernel), float32 sums;
//   3. the softmax on the score matrices' own elements, in registers, in base 2, relative to a per-row reference
//      kept as a matrix (`ref`: every column of row r holds row r's): p = exp2(scale s - ref). Which element of a
//      cooperative matrix a thread holds is the driver's choice, but it is the same for every matrix of one type
//      (element-wise arithmetic between two matrices depends on it), so a matrix holding each element's own row
//      and column (`where`) tells a thread where its elements lie, for the masks, and row-wise values are applied
//      as row-broadcast matrices. The row sums accumulate element by element in a matrix of their own, reduced
//      once at the end;
//   4. out += P V on the matrix units (P rounded to float16 through the subgroup's scratch, the one way from an
//      accumulator to an A matrix), into one float32 accumulator matrix per 16-column tile of the head, kept
//      across key blocks.
// The reference moves only when a probability would pass 2^LAZY (rare after the first block): then the block's
// exact row maxima are taken through the scratch (the one step that needs whole rows), and the sums and the
// output's matrices are rescaled element by element. (Until session 26 every block's scores went through shared
// memory and were read back by rows: SD 1.5's first-level self-attention 0.96 -> 0.69 ms on the H200.)
//
// D_TILES: 16-column tiles of the head dimension (d <= 16 D_TILES; columns past d are zeros).
#version 450
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_cooperative_matrix : require
layout(local_size_x = 128) in;
layout(push_constant) uniform Params {
    Ts q;
    Ts k;
    Ts v;
    Ts o;
    uint lq, lk, d, causal;
    uint sq, sk, sv, so;  // row strides, in elements
    float scale;
    uint loads;  // 8: every head's rows of q, k and v start on 16 bytes and d % 8 == 0 (16-byte loads); else 1 or 4
} p;
layout(buffer_reference, std430, buffer_reference_align = 16) buffer U128s { uvec4 v[]; };

#define BR 64u  // queries per workgroup
#define DP (16u * D_TILES)
// 32 keys a block (session 26: 64 held more registers, two workgroups a multiprocessor on NVIDIA's driver against
// three, and took SD 1.5's first-level self-attention 0.81 -> 0.69 ms)
#define BC 32u
#define ROW (DP / 8u + 1u)   // uvec4 (8 float16) per shared row of K or V, + 1 of padding against bank conflicts
#define SROW (BC / 4u + 1u)  // uvec4 (4 float32) per row of a subgroup's staging (a block's scores), + 1
#define PROW (BC / 8u + 1u)  // uvec4 (8 float16) per row of its probabilities, + 1 (over the staging's space)
#define SCRATCH (16u * SROW)
shared uvec4 sh_kv[2u * BC * ROW];    // K at 0, V at BC ROW; first Q's BR rows (BR <= 2 BC)
shared uvec4 sh_sg[4u * SCRATCH];
shared float sh_pair[128];            // the pairs' partial maxima and sums

#define MatA coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MatB coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define MatC coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define MatH coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define ROW_MAJOR gl_CooperativeMatrixLayoutRowMajor
#define NEG_MAX -3.402823466e38

uvec4 pack8(float x[8]) {
    return uvec4(packFloat2x16(f16vec2(x[0], x[1])), packFloat2x16(f16vec2(x[2], x[3])),
                 packFloat2x16(f16vec2(x[4], x[5])), packFloat2x16(f16vec2(x[6], x[7])));
}

// Columns c .. c + 7 of row `row` of a [rows x d] operand as 8 float16 values, zeros past its edges.
uvec4 load8(Ts t, uint base, uint stride, uint row, uint rows, uint c) {
    if (row >= rows || c >= p.d) return uvec4(0u);
    const uint at = base + row * stride + c;
    if (p.loads == 8u) return U128s(t).v[at >> 3];
    float x[8];
    [[unroll]] for (uint i = 0u; i < 8u; ++i) x[i] = c + i < p.d ? ld(t, at + i) : 0.0;
    return pack8(x);
}

// n rows from row0 on, into sh_kv from uvec4 `at`.
void load_rows(Ts t, uint base, uint stride, uint row0, uint rows, uint n, uint at) {
    for (uint g = gl_LocalInvocationIndex; g < n * (DP / 8u); g += 128u) {
        const uint r = g / (DP / 8u), c8 = g % (DP / 8u);
        sh_kv[at + r * ROW + c8] = load8(t, base, stride, row0 + r, rows, 8u * c8);
    }
}

// The next block's K and V, fetched into registers while this block is computed (PER_KV groups of 8 values of
// each a thread at most: BC DP / 8 of them over 128 threads), then stashed into shared memory.
#define KV_GROUPS (BC * DP / 8u)
#define PER_KV ((KV_GROUPS + 127u) / 128u)
uvec4 k_next[PER_KV], v_next[PER_KV];
void fetch_kv(uint j0, uint kb, uint vb) {
    [[unroll]] for (uint i = 0u; i < PER_KV; ++i) {
        const uint g = gl_LocalInvocationIndex + 128u * i, r = g / (DP / 8u), c = 8u * (g % (DP / 8u));
        if (KV_GROUPS % 128u == 0u || g < KV_GROUPS) {
            k_next[i] = load8(p.k, kb, p.sk, j0 + r, p.lk, c);
            v_next[i] = load8(p.v, vb, p.sv, j0 + r, p.lk, c);
        }
    }
}
void stash_kv() {
    [[unroll]] for (uint i = 0u; i < PER_KV; ++i) {
        const uint g = gl_LocalInvocationIndex + 128u * i, r = g / (DP / 8u), c8 = g % (DP / 8u);
        if (KV_GROUPS % 128u == 0u || g < KV_GROUPS) {
            sh_kv[r * ROW + c8] = k_next[i];
            sh_kv[(BC + r) * ROW + c8] = v_next[i];
        }
    }
}

void subgroup_sync() {
    subgroupMemoryBarrierShared();
    subgroupBarrier();
}

// The matrices are named one by one, never held in arrays (NVIDIA's driver runs arrays of cooperative matrices far
// slower: gemm_coop.glsl). FOR_D spells out the head's 16-column tiles.
#if D_TILES == 3
#define FOR_D(X) X(0) X(1) X(2)
#elif D_TILES == 4
#define FOR_D(X) X(0) X(1) X(2) X(3)
#elif D_TILES == 5
#define FOR_D(X) X(0) X(1) X(2) X(3) X(4)
#elif D_TILES == 8
#define FOR_D(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#elif D_TILES == 10
#define FOR_D(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9)
#else
#error "flash_attention_coop.comp: D_TILES is one of 3, 4, 5, 8, 10 (kernels.cmake)"
#endif
#if D_TILES == 3
#define FOR_D2(X, c) X(c, 0) X(c, 1) X(c, 2)
#elif D_TILES == 4
#define FOR_D2(X, c) X(c, 0) X(c, 1) X(c, 2) X(c, 3)
#elif D_TILES == 5
#define FOR_D2(X, c) X(c, 0) X(c, 1) X(c, 2) X(c, 3) X(c, 4)
#elif D_TILES == 8
#define FOR_D2(X, c) X(c, 0) X(c, 1) X(c, 2) X(c, 3) X(c, 4) X(c, 5) X(c, 6) X(c, 7)
#else
#define FOR_D2(X, c) X(c, 0) X(c, 1) X(c, 2) X(c, 3) X(c, 4) X(c, 5) X(c, 6) X(c, 7) X(c, 8) X(c, 9)
#endif
#define FOR_KT(X) X(0) X(1)  // the block's BC / 16 tiles of 16 keys
#define DECLARE_Q(j) MatA qm##j;
#define LOAD_Q(j) coopMatLoad(qm##j, sh_kv, 16u * sg * ROW + 2u * j, ROW, ROW_MAJOR);
#define DECLARE_O(j) MatC om##j = MatC(0.0);
// Scores of key tile c: Q (16 x DP) times K^T (DP x 16); K's rows are B's columns.
#define SCORE(c, j) coopMatLoad(kt, sh_kv, 16u * c * ROW + 2u * j, ROW, gl_CooperativeMatrixLayoutColumnMajor); \
                    s##c = coopMatMulAdd(qm##j, kt, s##c);
#define SCORES(c) MatC s##c = MatC(0.0); FOR_D2(SCORE, c)
// Base-2 units relative to the reference, masked where the tile needs it; `grows` where one would pass 2^LAZY.
#define RELATIVE(c) [[unroll]] for (int i = 0; i < s##c.length(); ++i) { \
        float x = scale2 * s##c[i] - ref[i]; \
        if (edge) { \
            const uint at = uint(where[i]), key = j0 + 16u * c + (at & 15u); \
            if (key >= p.lk || (p.causal != 0u && key > q0 + 16u * sg + (at >> 4))) x = NEG_MAX; \
        } \
        s##c[i] = x; \
        grows = grows || x > LAZY; \
    }
#define STAGE_S(c) coopMatStore(s##c, sh_sg, stage + 4u * c, SROW, ROW_MAJOR);
#define MOVE(c) [[unroll]] for (int i = 0; i < s##c.length(); ++i) s##c[i] -= f[i];
#define RESCALE_O(j) [[unroll]] for (int i = 0; i < om##j.length(); ++i) om##j[i] *= f[i];
// P = exp2 of it, added to the row sums, stored as float16 (as the products' path rounds it).
#define PROBABILITIES(c) [[unroll]] for (int i = 0; i < s##c.length(); ++i) { s##c[i] = exp2(s##c[i]); sums[i] += s##c[i]; } \
                         coopMatStore(MatH(s##c), sh_sg, stage + 2u * c, PROW, ROW_MAJOR);
// out += P V for key tile c: V's rows are B's rows.
#define PV(c, j) coopMatLoad(vt, sh_kv, (BC + 16u * c) * ROW + 2u * j, ROW, ROW_MAJOR); om##j = coopMatMulAdd(pm, vt, om##j);
#define PV_TILE(c) coopMatLoad(pm, sh_sg, stage + 2u * c, PROW, ROW_MAJOR); FOR_D2(PV, c)

// A matrix whose row r holds v_r in every column, from the pair of threads that own row r (each writing its half).
void put_row_value(uint at, float v) {
    sh_sg[at] = uvec4(floatBitsToUint(v));
    sh_sg[at + 1u] = uvec4(floatBitsToUint(v));
}

// Row qi's columns 16 j + 8h .. + 7 of the output from the staged tile at uvec4 `at`, times inv.
void store_row(uint j, float inv, uint qi, uint ob, uint at) {
    if (qi >= p.lq) return;
    const uvec4 lo = sh_sg[at], hi = sh_sg[at + 1u];
    const uint col0 = 16u * j + 8u * (gl_SubgroupInvocationID & 1u);
    [[unroll]] for (uint e = 0u; e < 8u; ++e) {
        const uint col = col0 + e;
        if (col < p.d) st(p.o, ob + qi * p.so + col, uintBitsToFloat(e < 4u ? lo[e] : hi[e - 4u]) * inv);
    }
}

// Scores are kept in base-2 units (scale log2(e) folded in) so that the probabilities are exp2 of them.
#define LOG2E 1.4426950408889634
// Probabilities are relative to a reference that moves only when one would exceed 2^LAZY, so they stay below 2^LAZY
// (float16 holds them with its 11 bits as it holds values below 1; the float32 sums cannot overflow).
#define LAZY 8.0

void main() {
    const uint t = gl_LocalInvocationIndex, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    const uint r = lane >> 1, h = lane & 1u;  // this thread's row of the subgroup's 16, and its half (by rows)
    const uint q0 = gl_WorkGroupID.x * BR, head = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
    const uint qb = b * p.lq * p.sq + head * p.d, kb = b * p.lk * p.sk + head * p.d;
    const uint vb = b * p.lk * p.sv + head * p.d, ob = b * p.lq * p.so + head * p.d;
    const uint qi = q0 + 16u * sg + r;
    const uint stage = sg * SCRATCH;                 // the subgroup's staging
    const uint pair_at = stage + r * SROW + 2u * h;  // this thread's 8 of the first 16 columns of row r there
    const float scale2 = p.scale * LOG2E;
    // Keys past the last query of the block are all masked when causal: their blocks are skipped.
    const uint keys = p.causal != 0u ? min(p.lk, q0 + BR) : p.lk;

    load_rows(p.q, qb, p.sq, q0, p.lq, BR, 0u);
    barrier();
    FOR_D(DECLARE_Q)
    FOR_D(LOAD_Q)
    barrier();  // before K overwrites Q

    // where: element (i, j) = 16 i + j, so a thread knows the row and column of each element it holds.
    sh_sg[pair_at] = uvec4(floatBitsToUint(float(16u * r + 8u * h)), floatBitsToUint(float(16u * r + 8u * h + 1u)),
                           floatBitsToUint(float(16u * r + 8u * h + 2u)), floatBitsToUint(float(16u * r + 8u * h + 3u)));
    sh_sg[pair_at + 1u] = uvec4(floatBitsToUint(float(16u * r + 8u * h + 4u)), floatBitsToUint(float(16u * r + 8u * h + 5u)),
                                floatBitsToUint(float(16u * r + 8u * h + 6u)), floatBitsToUint(float(16u * r + 8u * h + 7u)));
    subgroup_sync();
    MatC where;
    coopMatLoad(where, sh_sg, stage, SROW, ROW_MAJOR);
    subgroup_sync();

    FOR_D(DECLARE_O)
    MatC ref = MatC(0.0);  // one declaration each (glslang 13.1: below)
    MatC sums = MatC(0.0);
    MatC f;
    MatB kt;  // one declaration each: glslang 13.1 gives a second declarator in one statement no matrix use (invalid SPIR-V)
    MatB vt;
    MatA pm;

    fetch_kv(0u, kb, vb);
    for (uint j0 = 0u; j0 < keys; j0 += BC) {
        stash_kv();
        barrier();
        if (j0 + BC < keys) fetch_kv(j0 + BC, kb, vb);

        FOR_KT(SCORES)
        // Masks only where this block has keys past the last, or (causal) past the subgroup's first query.
        const bool edge = j0 + BC > p.lk || (p.causal != 0u && j0 + BC - 1u > q0 + 16u * sg);
        bool grows = false;
        FOR_KT(RELATIVE)
        if (j0 == 0u || subgroupAny(grows)) {
            // The block's row maxima through the staging; the reference moves up by them (the first block sets it).
            FOR_KT(STAGE_S)
            subgroup_sync();
            float pair_max = NEG_MAX;
            [[unroll]] for (uint i = 0u; i < BC / 8u; ++i) {
                const uvec4 w = sh_sg[stage + r * SROW + 2u * i + h];  // 4-key chunks 2i + h: the halves' banks differ
                pair_max = max(pair_max, max(max(uintBitsToFloat(w.x), uintBitsToFloat(w.y)),
                                             max(uintBitsToFloat(w.z), uintBitsToFloat(w.w))));
            }
            sh_pair[t] = pair_max;
            subgroup_sync();
            const float block_max = max(pair_max, sh_pair[t ^ 1u]);
            // A row with every key of its first block masked (none is, causal or not: key 0 is never) keeps 0.
            const float up = j0 == 0u ? (block_max > -3.0e38 ? block_max : 0.0) : max(block_max, 0.0);
            put_row_value(pair_at, up);
            subgroup_sync();
            coopMatLoad(f, sh_sg, stage, SROW, ROW_MAJOR);
            FOR_KT(MOVE)
            [[unroll]] for (int i = 0; i < f.length(); ++i) {
                ref[i] += f[i];
                f[i] = exp2(-f[i]);
            }
            if (j0 != 0u) {  // (the first block has no sums yet, and its f may be huge)
                [[unroll]] for (int i = 0; i < sums.length(); ++i) sums[i] *= f[i];
                FOR_D(RESCALE_O)
            }
            subgroup_sync();  // every thread has read the staging before the probabilities go over it
        }
        FOR_KT(PROBABILITIES)
        subgroup_sync();
        FOR_KT(PV_TILE)
        barrier();  // K, V and every scratch read before the next block overwrites them
    }

    // A row's sum: its 16 columns of `sums`, through the staging by the pair that owns the row.
    coopMatStore(sums, sh_sg, stage, SROW, ROW_MAJOR);
    subgroup_sync();
    const uvec4 lo = sh_sg[pair_at], hi = sh_sg[pair_at + 1u];
    float pair_sum = 0.0;
    [[unroll]] for (uint e = 0u; e < 4u; ++e) pair_sum += uintBitsToFloat(lo[e]) + uintBitsToFloat(hi[e]);
    sh_pair[t] = pair_sum;
    subgroup_sync();
    const float inv = 1.0 / (pair_sum + sh_pair[t ^ 1u]);

    // Each tile of the output through the staging, divided by the row's sum.
#define STORE_O(j) subgroup_sync(); coopMatStore(om##j, sh_sg, stage, SROW, ROW_MAJOR); subgroup_sync(); \
                   store_row(j, inv, qi, ob, pair_at);
    FOR_D(STORE_O)
}
