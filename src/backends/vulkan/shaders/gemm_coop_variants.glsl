// Variants of gemm_coop.glsl's tile (issue 23), KHR only, run by KILN_VULKAN_COOP=<name> as the "_coopk_<name>"
// kernels (kernels.cmake). Same interface and product; a different geometry or sum type:
//   COOP_SG32     128x64 tiles, 8 subgroups of 32x32 (2 x 2 accumulators, half of gemm_coop.glsl's 4 x 2): half
//                 the accumulator registers (128-145 against 232-237 on NVIDIA's driver), and the convolutions
//                 25-35% faster on the H200. The default on KHR builds (vulkan_backend.cpp; docs/VULKAN.md).
//   COOP_F16_SUMS gemm_coop.glsl's geometry with float16 accumulators, measurement only, never a default: 2^-11
//                 per addition, overflow past 65504.
// Session 18-19 measured and removed others (k steps of 64, 4 subgroups of 64x64, 128x256 tiles, two shared
// stages, float16 shared memory, a packed-only prefetch, and sg32 with each): none faster (docs/VULKAN.md).
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_cooperative_matrix : require
#define TILE_M 128u  // gemm_build.glsl and the kernels' main() take TILE_M x TILE_N tiles
#ifdef COOP_SG32
#define TILE_N 64u
#define NG_SHIFT 3u  // groups of 8 n per row of a row-major B
#define ACC_M 2u     // accumulators down m per subgroup
#else
#define TILE_N 128u
#define NG_SHIFT 4u
#define ACC_M 4u
#endif
#define ACC_N 2u  // and across n
#define NG_MASK ((1u << NG_SHIFT) - 1u)
#define TILE_K 32u
#define K_ROW 5u  // uvec4 per row of 32 k (4, + 1 of padding)
#define KG_SHIFT 2u
#define KG_MASK 3u                   // groups of 8 k per shared row
#define N_ROW ((TILE_N >> 3) + 1u)  // uvec4 per row of a row-major B (TILE_N / 8, + 1 of padding)
#define SG_COLS (TILE_N / 16u / ACC_N)  // subgroups across the tile
#define SG_ROWS (TILE_M / 16u / ACC_M)  // and down it
#define THREADS (SG_ROWS * SG_COLS * 32u)
#define SG_M(sg) ((sg) / SG_COLS * 16u * ACC_M)
#define SG_N(sg) ((sg) % SG_COLS * 16u * ACC_N)
#define PER_A (TILE_M * TILE_K / 8u / THREADS)  // groups of 8 values of A a thread fetches
#define PER_B (TILE_N * TILE_K / 8u / THREADS)
shared uvec4 sh_a[TILE_M * K_ROW];
shared uvec4 sh_b[TILE_N * K_ROW];  // a row-major B needs TILE_K * N_ROW, less
shared float staged[THREADS / 32u * 256u];  // one 16x16 accumulator per subgroup, for the epilogue

#define MatA coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MatB coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define MatOut coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#ifdef COOP_F16_SUMS
#define MatSum coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define ZERO float16_t(0.0)
#else
#define MatSum MatOut
#define ZERO 0.0
#endif

#include "gemm_coop_operands.glsl"

// Prefetch as gemm_coop.glsl. Group g of A: row m, k .. k+7 at shared row g >> KG_SHIFT; of B likewise when
// its k is contiguous, else row k, n .. n+7 at shared row g >> NG_SHIFT.
uvec4 vec_a[PER_A], vec_b[PER_B];
float one_a[PER_A][8], one_b[PER_B][8];
bool is_vec_a[PER_A], is_vec_b[PER_B];

void fetch(uint m0, uint n0, uint k0, uint M, uint N, uint K, bool b_k_fast) {
    float v[8];
    [[unroll]] for (uint r = 0u; r < PER_A; ++r) {
        const uint g = gl_LocalInvocationIndex + THREADS * r;
        const uint m = m0 + (g >> KG_SHIFT), ka = k0 + (g & KG_MASK) * 8u;
        bool vec = false;
#ifdef HAS_LOAD8
        if (ka < K) vec = load_a8(m, ka, vec_a[r]);
#endif
        if (!vec) [[unroll]] for (uint i = 0u; i < 8u; ++i) v[i] = a_or_0(m, ka + i, M, K);
        is_vec_a[r] = vec;
        one_a[r] = v;
    }
    [[unroll]] for (uint r = 0u; r < PER_B; ++r) {
        const uint g = gl_LocalInvocationIndex + THREADS * r;
        const uint n = b_k_fast ? n0 + (g >> KG_SHIFT) : n0 + (g & NG_MASK) * 8u;
        const uint kb = b_k_fast ? k0 + (g & KG_MASK) * 8u : k0 + (g >> NG_SHIFT);
        bool vec = false;
#ifdef HAS_LOAD8
        if (kb < K) vec = load_b8(kb, n, b_k_fast, vec_b[r]);
#endif
        if (!vec) {
            if (b_k_fast) {
                [[unroll]] for (uint i = 0u; i < 8u; ++i) v[i] = b_or_0(kb + i, n, N, K);
            } else {
                [[unroll]] for (uint i = 0u; i < 8u; ++i) v[i] = b_or_0(kb, n + i, N, K);
            }
        }
        is_vec_b[r] = vec;
        one_b[r] = v;
    }
}

void stash(bool b_k_fast) {
    [[unroll]] for (uint r = 0u; r < PER_A; ++r) {
        const uint g = gl_LocalInvocationIndex + THREADS * r;
        sh_a[(g >> KG_SHIFT) * K_ROW + (g & KG_MASK)] = is_vec_a[r] ? vec_a[r] : pack8(one_a[r]);
    }
    [[unroll]] for (uint r = 0u; r < PER_B; ++r) {
        const uint g = gl_LocalInvocationIndex + THREADS * r;
        const uvec4 b = is_vec_b[r] ? vec_b[r] : pack8(one_b[r]);
        if (b_k_fast)
            sh_b[(g >> KG_SHIFT) * K_ROW + (g & KG_MASK)] = b;
        else
            sh_b[(g >> NG_SHIFT) * N_ROW + (g & NG_MASK)] = b;
    }
}

void gemm(uint m0, uint n0, uint M, uint N, uint k_begin, uint K, bool a_k_fast, bool b_k_fast) {
    const uint sg = gl_SubgroupID;
    const uint wm = SG_M(sg), wn = SG_N(sg);  // this subgroup's block of the tile
    MatSum acc[ACC_M][ACC_N];
    [[unroll]] for (uint i = 0u; i < ACC_M; ++i)
        [[unroll]] for (uint j = 0u; j < ACC_N; ++j) acc[i][j] = MatSum(ZERO);
    fetch(m0, n0, k_begin, M, N, K, b_k_fast);
    for (uint k0 = k_begin; k0 < K; k0 += TILE_K) {
        barrier();  // the previous step's matrix loads are done with shared memory
        stash(b_k_fast);
        barrier();
        if (k0 + TILE_K < K) fetch(m0, n0, k0 + TILE_K, M, N, K, b_k_fast);
        [[unroll]] for (uint kk = 0u; kk < TILE_K; kk += 16u) {
            MatA a[ACC_M];
            MatB b[ACC_N];
            [[unroll]] for (uint i = 0u; i < ACC_M; ++i)
                coopMatLoad(a[i], sh_a, (wm + 16u * i) * K_ROW + kk / 8u, K_ROW, gl_CooperativeMatrixLayoutRowMajor);
            if (b_k_fast) {
                [[unroll]] for (uint j = 0u; j < ACC_N; ++j)
                    coopMatLoad(b[j], sh_b, (wn + 16u * j) * K_ROW + kk / 8u, K_ROW, gl_CooperativeMatrixLayoutColumnMajor);
            } else {
                [[unroll]] for (uint j = 0u; j < ACC_N; ++j)
                    coopMatLoad(b[j], sh_b, kk * N_ROW + (wn + 16u * j) / 8u, N_ROW, gl_CooperativeMatrixLayoutRowMajor);
            }
            [[unroll]] for (uint i = 0u; i < ACC_M; ++i)
                [[unroll]] for (uint j = 0u; j < ACC_N; ++j) acc[i][j] = coopMatMulAdd(a[i], b[j], acc[i][j]);
        }
    }
    const uint base = sg * 256u;
    [[unroll]] for (uint i = 0u; i < ACC_M; ++i)
        [[unroll]] for (uint j = 0u; j < ACC_N; ++j) {
            coopMatStore(MatOut(acc[i][j]), staged, base, 16u, gl_CooperativeMatrixLayoutRowMajor);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            for (uint e = gl_SubgroupInvocationID; e < 256u; e += gl_SubgroupSize) {
                const uint m = m0 + wm + 16u * i + e / 16u, n = n0 + wn + 16u * j + e % 16u;
                if (m < M && n < N) store_c(m, n, staged[base + e]);
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();  // the next accumulator overwrites this one's staging
        }
}
