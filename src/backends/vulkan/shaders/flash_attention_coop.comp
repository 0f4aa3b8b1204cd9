// Attention without a score matrix in memory, on the matrix units (VK_KHR_cooperative_matrix): out = softmax(scale
// Q K^T) V for 64 queries of one head of one batch entry per workgroup, float16 tensors only. The same interface as
// flash_attention.comp (its push constants), which stays the kernel of GPUs without matrix units.
//
// 128 threads: 4 subgroups of 32 (the pipeline asks for 32), each owning 16 of the block's queries from start to
// end, so within a key block a subgroup synchronises only with itself. Per block of BC keys:
//   1. K and V (BC x DP, float16) into shared memory, by the whole workgroup, from registers that fetched them
//      during the previous block;
//   2. each subgroup: its 16 x BC scores on the matrix units (Q held in registers as D_TILES A matrices for the
//      whole kernel), float32 sums, stored to its own shared scratch;
//   3. the online softmax in float32 by thread pairs (thread 2r + h: row r, half h of the keys), in base 2, relative
//      to a row maximum that moves only when it grows by more than 2^LAZY (below); the probabilities written back
//      over the scores as float16 (as the products' path rounds them);
//   4. out += P V on the matrix units, into one float32 accumulator matrix per 16-column tile of the head, kept
//      across key blocks; each tile goes through the scratch once at the end, divided by its row's sum.
// A row's sums need rescaling when its maximum moves, and which element of a cooperative matrix a thread holds is
// the driver's choice, so a rescale stages the tiles through the scratch (rare after the first block: LAZY).
//
// D_TILES: 16-column tiles of the head dimension (d <= 16 D_TILES; columns past d are zeros). Heads past 80
// dimensions take blocks of 32 keys so that K, V and the scratch stay within 32 KiB of shared memory.
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
#if D_TILES > 5
#define BC 32u
#else
#define BC 64u
#endif
#define KT (BC / 16u)        // 16-key tiles per block
#define ROW (DP / 8u + 1u)   // uvec4 (8 float16) per shared row of K or V, + 1 of padding against bank conflicts
#define SROW (BC / 4u + 1u)  // uvec4 (4 float32) per row of a subgroup's scores, + 1
#define PROW (BC / 8u + 1u)  // uvec4 (8 float16) per row of its probabilities, + 1 (over the scores' space)
shared uvec4 sh_kv[2u * BC * ROW];   // K at 0, V at BC ROW; first Q's BR rows (BR <= 2 BC)
shared uvec4 sh_sg[4u * 16u * SROW];  // per subgroup: its scores, then probabilities, then P V tiles
shared float sh_pair[128];           // the pairs' partial maxima and sums

#define MatA coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MatB coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define MatC coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
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
// each a thread: BC DP / 8 / 128, whole for every build), then stashed into shared memory.
#define PER_KV (BC * DP / 8u / 128u)
uvec4 k_next[PER_KV], v_next[PER_KV];
void fetch_kv(uint j0, uint kb, uint vb) {
    [[unroll]] for (uint i = 0u; i < PER_KV; ++i) {
        const uint g = gl_LocalInvocationIndex + 128u * i, r = g / (DP / 8u), c = 8u * (g % (DP / 8u));
        k_next[i] = load8(p.k, kb, p.sk, j0 + r, p.lk, c);
        v_next[i] = load8(p.v, vb, p.sv, j0 + r, p.lk, c);
    }
}
void stash_kv() {
    [[unroll]] for (uint i = 0u; i < PER_KV; ++i) {
        const uint g = gl_LocalInvocationIndex + 128u * i, r = g / (DP / 8u), c8 = g % (DP / 8u);
        sh_kv[r * ROW + c8] = k_next[i];
        sh_kv[(BC + r) * ROW + c8] = v_next[i];
    }
}

void subgroup_sync() {
    subgroupMemoryBarrierShared();
    subgroupBarrier();
}

// The matrices are named one by one, never held in arrays (NVIDIA's driver runs arrays of cooperative matrices far
// slower: gemm_coop.glsl). FOR_D spells out the head's 16-column tiles, FOR_KT the block's 16-key tiles (with a
// second argument passed on, so that FOR_D's head tile can reach into it).
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
#if D_TILES <= 5  // BC 64: 4 tiles of 16 keys
#define FOR_KT(X, j) X(0, j) X(1, j) X(2, j) X(3, j)
#else
#define FOR_KT(X, j) X(0, j) X(1, j)
#endif
#define DECLARE_Q(j) MatA qm##j;
#define LOAD_Q(j) coopMatLoad(qm##j, sh_kv, 16u * sg * ROW + 2u * j, ROW, ROW_MAJOR);
#define DECLARE_O(j) MatC om##j = MatC(0.0);
#define SCORE(j) coopMatLoad(kt, sh_kv, 16u * c * ROW + 2u * j, ROW, gl_CooperativeMatrixLayoutColumnMajor); \
                 s = coopMatMulAdd(qm##j, kt, s);
#define DECLARE_P(c, unused) MatA pm##c;
#define LOAD_P(c, unused) coopMatLoad(pm##c, sh_sg, own + 2u * c, PROW, ROW_MAJOR);
#define PV(c, j) coopMatLoad(vt, sh_kv, (BC + 16u * c) * ROW + 2u * j, ROW, ROW_MAJOR); om##j = coopMatMulAdd(pm##c, vt, om##j);
#define PV_ALL_KEYS(j) FOR_KT(PV, j)
#define STAGE_O(j) subgroup_sync(); coopMatStore(om##j, sh_sg, own, SROW, ROW_MAJOR); subgroup_sync();

// The pair's 8 columns of tile j (columns 8h .. 8h + 7 of row r) out of the scratch, times f, and back.
void rescale_staged(float f) {
    const uint at = gl_SubgroupID * 16u * SROW + (gl_SubgroupInvocationID >> 1) * SROW + 2u * (gl_SubgroupInvocationID & 1u);
    sh_sg[at] = floatBitsToUint(uintBitsToFloat(sh_sg[at]) * f);
    sh_sg[at + 1u] = floatBitsToUint(uintBitsToFloat(sh_sg[at + 1u]) * f);
}
#define RESCALE_O(j) STAGE_O(j) rescale_staged(rescale); subgroup_sync(); coopMatLoad(om##j, sh_sg, own, SROW, ROW_MAJOR);

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
// The output's sums stay in matrices across key blocks: their rows are rescaled only when a row's maximum grows by
// more than 2^LAZY over the one its probabilities are relative to, so probabilities stay below 2^LAZY (float16 holds
// them with its 11 bits as it holds values below 1; the float32 sums cannot overflow). Such a rescale stages the
// subgroup's sums through its scratch; after a first block it is rare.
#define LAZY 8.0

void main() {
    const uint t = gl_LocalInvocationIndex, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    const uint r = lane >> 1, h = lane & 1u;  // this thread's row of the subgroup's 16, and its half
    const uint q0 = gl_WorkGroupID.x * BR, head = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
    const uint qb = b * p.lq * p.sq + head * p.d, kb = b * p.lk * p.sk + head * p.d;
    const uint vb = b * p.lk * p.sv + head * p.d, ob = b * p.lq * p.so + head * p.d;
    const uint qi = q0 + 16u * sg + r;
    const uint own = sg * 16u * SROW;  // the subgroup's scratch
    const float scale2 = p.scale * LOG2E;
    // Keys past the last query of the block are all masked when causal: their blocks are skipped.
    const uint keys = p.causal != 0u ? min(p.lk, q0 + BR) : p.lk;

    load_rows(p.q, qb, p.sq, q0, p.lq, BR, 0u);
    barrier();
    FOR_D(DECLARE_Q)
    FOR_D(LOAD_Q)
    barrier();  // before K overwrites Q

    FOR_D(DECLARE_O)
    float row_max = NEG_MAX, row_sum = 0.0;
    MatB kt;  // one declaration each: glslang 13.1 gives a second declarator in one statement no matrix use (invalid SPIR-V)
    MatB vt;

    fetch_kv(0u, kb, vb);
    for (uint j0 = 0u; j0 < keys; j0 += BC) {
        stash_kv();
        barrier();
        if (j0 + BC < keys) fetch_kv(j0 + BC, kb, vb);

        // Scores: Q (16 x DP) times K^T (DP x 16) per tile of keys; K's rows are B's columns.
        [[unroll]] for (uint c = 0u; c < KT; ++c) {
            MatC s = MatC(0.0);
            FOR_D(SCORE)
            coopMatStore(s, sh_sg, own + 4u * c, SROW, ROW_MAJOR);
        }
        subgroup_sync();

        // The pair's half of row r: 4-key chunks 2i + h (interleaved, so the two read different banks).
        float x[BC / 2u];
        float pair_max = NEG_MAX;
        [[unroll]] for (uint i = 0u; i < BC / 8u; ++i) {
            const uvec4 w = sh_sg[own + r * SROW + 2u * i + h];
            [[unroll]] for (uint e = 0u; e < 4u; ++e) {
                const uint key = j0 + 8u * i + 4u * h + e;
                const bool masked = key >= p.lk || (p.causal != 0u && key > qi);
                x[4u * i + e] = masked ? NEG_MAX : scale2 * uintBitsToFloat(w[e]);
                pair_max = max(pair_max, x[4u * i + e]);
            }
        }
        sh_pair[t] = pair_max;
        subgroup_sync();
        const float block_max = max(pair_max, sh_pair[t ^ 1u]);
        // The first block sets each row's reference (the sums are zero); later ones move it only past LAZY, and then
        // every row of the subgroup takes its own maximum so far.
        float rescale = 1.0;
        if (j0 == 0u) {
            row_max = block_max;
        } else if (subgroupAny(block_max > row_max + LAZY)) {
            const float new_max = max(row_max, block_max);
            rescale = exp2(row_max - new_max);
            row_max = new_max;
            FOR_D(RESCALE_O)
        }
        float pair_sum = 0.0;
        [[unroll]] for (uint i = 0u; i < BC / 2u; ++i) {
            x[i] = x[i] > -3.0e38 ? exp2(x[i] - row_max) : 0.0;
            pair_sum += x[i];
        }
        subgroup_sync();  // both halves have read the maxima, and every score (or staged sum) is read
        sh_pair[t] = pair_sum;
        // The probabilities over the scores: chunk 2i + h is keys 8i + 4h .. + 3, half of uvec4 i of row r.
        [[unroll]] for (uint i = 0u; i < BC / 8u; ++i) {
            const uvec2 w = uvec2(packFloat2x16(f16vec2(x[4u * i], x[4u * i + 1u])),
                                  packFloat2x16(f16vec2(x[4u * i + 2u], x[4u * i + 3u])));
            if (h == 0u)
                sh_sg[own + r * PROW + i].xy = w;
            else
                sh_sg[own + r * PROW + i].zw = w;
        }
        subgroup_sync();
        row_sum = row_sum * rescale + pair_sum + sh_pair[t ^ 1u];

        // out += P V: P (16 x BC) from the scratch, V's rows are B's rows.
        FOR_KT(DECLARE_P, _)
        FOR_KT(LOAD_P, _)
        FOR_D(PV_ALL_KEYS)
        barrier();  // K, V and every scratch read before the next block overwrites them
    }

    // Each tile of the sums through the scratch, divided by the row's sum, to the output.
    const float inv = 1.0 / row_sum;
#define STORE_O(j) STAGE_O(j) store_row(j, inv, qi, ob, own + r * SROW + 2u * h);
    FOR_D(STORE_O)
}
