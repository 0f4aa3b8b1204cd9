// Measurement only (bench/vulkan/coop_peak_bench.cpp, issue 23): how fast the driver runs
// VK_KHR_cooperative_matrix's multiply-adds by themselves, so that the product kernels' ~30 TFLOP/s on the H200
// can be split into what the matrix units give and what the kernel around them costs. 256 threads, 8 subgroups
// of 32, each with gemm_coop.glsl's (base's) 4 x 2 accumulators of 16x16 (float32 sums, or float16 with ACC_F16).
// mode 0: A and B loaded from shared memory once, then `iters` rounds of the 8 multiply-adds on registers;
// mode 1: A and B loaded again from shared memory every round, as gemm_coop.glsl's inner loop does (no barriers);
// mode 2: as 1, but subgroups start 32 rows apart instead of sharing the tile's rows (neighbours overlap);
// mode 3: as 1 with B loaded row-major; mode 4: only A reloaded; 5-10: below.
#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
layout(local_size_x = 256) in;
layout(buffer_reference, std430, buffer_reference_align = 16) buffer U4s { uvec4 v[]; };
layout(push_constant) uniform Params { F32s out_; uint iters, mode; U4s src; uint src_n, out_n; } p;

#ifdef ACC_F16
#define SUM_T float16_t
#else
#define SUM_T float
#endif
#define MatA coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MatB coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define MatSum coopmat<SUM_T, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define ROW 5u  // uvec4 per shared row of 32 float16 (4, + 1 of padding), as gemm_coop.glsl
shared uvec4 sh[256u * ROW];
shared SUM_T staged[8u * 256u];

#ifdef GLOBAL_FETCH
// The prefetch at module scope, as gemm_coop.glsl keeps it (its fetch() and stash() share it), instead of in main.
uvec4 fetched[4];
#endif

void main() {
    for (uint i = gl_LocalInvocationIndex; i < 256u * ROW; i += 256u)
        sh[i] = uvec4(packFloat2x16(f16vec2(float16_t(1e-3), float16_t(-1e-3))));
    barrier();
    const uint sg = gl_SubgroupID;
    // mode 2: 32 rows of its own per subgroup (A rows 0..63 of 256 shared rows, wrapping); else the tile's rows.
    const uint wm = p.mode == 2u ? (sg * 32u) % 192u : (sg >> 2) * 64u, wn = p.mode == 2u ? 192u : (sg & 3u) * 32u;
    MatSum acc[4][2];
    [[unroll]] for (uint i = 0u; i < 4u; ++i)
        [[unroll]] for (uint j = 0u; j < 2u; ++j) acc[i][j] = MatSum(SUM_T(0.0));
    MatA a[4];
    MatB b[2];
    [[unroll]] for (uint i = 0u; i < 4u; ++i) coopMatLoad(a[i], sh, (wm + 16u * i) * ROW, ROW, gl_CooperativeMatrixLayoutRowMajor);
    [[unroll]] for (uint j = 0u; j < 2u; ++j) coopMatLoad(b[j], sh, (wn + 16u * j) * ROW, ROW, gl_CooperativeMatrixLayoutColumnMajor);
#ifndef GLOBAL_FETCH
    uvec4 fetched[4];
#endif
    [[unroll]] for (uint r = 0u; r < 4u; ++r) fetched[r] = uvec4(0u);
    float one[4][8];  // mode 10's fallback: 8 values a group, one by one (never taken; the registers are held)
    bool is_vec[4];
    [[unroll]] for (uint r = 0u; r < 4u; ++r) is_vec[r] = true;
    for (uint it = 0u; it < p.iters; ++it) {
        // Modes 5-7 add, every 2 rounds (a k step of 32), what gemm_coop.glsl does around its multiplies: 5 its two
        // barriers; 6 also its stash (4 uvec4 a thread into shared memory); 7 also its fetch of the next step
        // (4 coalesced 16-byte global loads a thread, issued before the multiplies as its prefetch is).
        if (p.mode >= 5u && (it & 1u) == 0u) {
            barrier();
            if (p.mode >= 6u)
                [[unroll]] for (uint r = 0u; r < 4u; ++r)
                    sh[gl_LocalInvocationIndex + 256u * r] =
                        is_vec[r] ? fetched[r]
                                  : uvec4(packFloat2x16(f16vec2(one[r][0], one[r][1])), packFloat2x16(f16vec2(one[r][2], one[r][3])),
                                          packFloat2x16(f16vec2(one[r][4], one[r][5])), packFloat2x16(f16vec2(one[r][6], one[r][7])));
            barrier();
            // Mode 9: the fetch addressed as gemm_coop.glsl's (group g: row g / 4 of the tile's A and B, rows of
            // 16384 k apart, 8 k a group); mode 10: and its scalar fallback beside the 16-byte loads.
            if (p.mode >= 7u)
                [[unroll]] for (uint r = 0u; r < 4u; ++r) {
                    const uint g = gl_LocalInvocationIndex + 256u * r;
                    const uint at = p.mode >= 9u
                                        ? ((gl_WorkGroupID.x % 16u) * 128u + (g >> 2)) * 2048u + (it >> 1) * 4u + (g & 3u)
                                        : (gl_WorkGroupID.x * 64u + it) * 1024u + gl_LocalInvocationIndex * 4u + r;
                    is_vec[r] = p.mode < 10u || p.out_n != 0u;  // always true, which the compiler cannot know
                    if (is_vec[r])
                        fetched[r] = p.src.v[at % p.src_n];
                    else
                        [[unroll]] for (uint i = 0u; i < 8u; ++i) one[r][i] = float(F16s(p.src).v[(at * 8u + i) % (p.src_n * 8u)]);
                }
        }
        if (p.mode != 0u) {
            const uint kk = (it & 1u) * 2u;  // the two 16-wide halves of a 32-wide k step
            [[unroll]] for (uint i = 0u; i < 4u; ++i)
                coopMatLoad(a[i], sh, (wm + 16u * i) * ROW + kk, ROW, gl_CooperativeMatrixLayoutRowMajor);
            if (p.mode == 3u) {
                [[unroll]] for (uint j = 0u; j < 2u; ++j)
                    coopMatLoad(b[j], sh, (wn + 16u * j) * ROW + kk, ROW, gl_CooperativeMatrixLayoutRowMajor);
            } else if (p.mode != 4u) {
                [[unroll]] for (uint j = 0u; j < 2u; ++j)
                    coopMatLoad(b[j], sh, (wn + 16u * j) * ROW + kk, ROW, gl_CooperativeMatrixLayoutColumnMajor);
            }
        }
        [[unroll]] for (uint i = 0u; i < 4u; ++i)
            [[unroll]] for (uint j = 0u; j < 2u; ++j) acc[i][j] = coopMatMulAdd(a[i], b[j], acc[i][j]);
        // Mode 8: as 7, and every 40 rounds (a tile of k = 640, SD's linear layers) the kernel's epilogue: each
        // accumulator staged through shared memory and stored element by element to device memory, then zeroed.
        if (p.mode == 8u && it % 40u == 39u) {
            const uint base = sg * 256u;
            [[unroll]] for (uint i = 0u; i < 4u; ++i)
                [[unroll]] for (uint j = 0u; j < 2u; ++j) {
                    coopMatStore(acc[i][j], staged, base, 16u, gl_CooperativeMatrixLayoutRowMajor);
                    subgroupMemoryBarrierShared();
                    subgroupBarrier();
                    for (uint e = gl_SubgroupInvocationID; e < 256u; e += gl_SubgroupSize) {
                        const uint m = wm + 16u * i + e / 16u, n = wn + 16u * j + e % 16u;
                        st_f32(p.out_, (gl_WorkGroupID.x * 16384u + m * 128u + n) % p.out_n, float(staged[base + e]));
                    }
                    subgroupMemoryBarrierShared();
                    subgroupBarrier();
                    acc[i][j] = MatSum(SUM_T(0.0));
                }
        }
    }
    MatSum total = acc[0][0];
    [[unroll]] for (uint i = 0u; i < 4u; ++i)
        [[unroll]] for (uint j = 0u; j < 2u; ++j)
            if (i + j > 0u) total = total + acc[i][j];
    coopMatStore(total, staged, sg * 256u, 16u, gl_CooperativeMatrixLayoutRowMajor);
    barrier();
    // Every element of every subgroup's sum goes to memory: with one element a subgroup stored (sessions 18-19), the
    // driver could drop most of the multiply-adds, and modes 0-4 read 600 TFLOP/s that a live loop never reaches.
    for (uint e = gl_LocalInvocationIndex; e < 8u * 256u; e += 256u)
        st_f32(p.out_, (gl_WorkGroupID.x * 2048u + e) % p.out_n, float(staged[e]));
}
