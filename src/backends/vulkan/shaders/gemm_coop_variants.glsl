// Variants of gemm_coop.glsl's tile under measurement (issue 23: the kernel runs at ~30 TFLOP/s on the H200, while
// its multiply-adds and shared-memory matrix loads alone run at 350-600: bench/vulkan/coop_peak_bench.cpp). Same
// interface and product, KHR only; SG32 is the default on KHR builds (vulkan_backend.cpp); the "_coopk_<name>" kernels (kernels.cmake), run by KILN_VULKAN_COOP=<name>. One change each:
//   COOP_K64      k steps of 64: twice the matrix work per pair of barriers (with one or two workgroups per
//                 multiprocessor, a barrier idles the matrix units).
//   COOP_SG4      128 threads, 4 subgroups of 64x64 (4 x 4 accumulators): 8 matrix loads per 16 multiply-adds,
//                 not 6 per 8; half the warps at each barrier (llama.cpp's large coopmat1 geometry).
//   COOP_WIDE     128x256 tiles, 8 subgroups of 64x64: twice the work per barrier and per operand loaded (n is
//                 the wide side: SD's convolutions have few output channels, m).
//   COOP_DB       two stages of shared memory, the prefetch stored into the other after the multiplies: one
//                 barrier per k step.
//   COOP_SH_F16   shared memory as float16_t, the matrices' own type: a driver may load from uvec4 on a slow
//                 path (llama.cpp's coopmat1 loads from f16vec2).
//   COOP_LEAN     the prefetch kept only packed as float16, not also as 8 floats a group: 32 registers fewer.
//                 NVIDIA's cooperative-matrix sample is organised like gemm_coop.glsl but that lean.
//   COOP_F16_SUMS float16 accumulators, measurement only, never a default: 2^-11 per addition, overflow past
//                 65504.
//   COOP_SG32     128x64 tiles, 8 subgroups of 32x32 (2 x 2 accumulators): half the accumulator registers, so
//                 that the compiler keeps the prefetch ahead of the multiplies (session 19's bench: registers
//                 cost the pipeline more than its barriers). Combined (kernels.cmake): sg32l with LEAN, sg32k with
//                 K64 (a row of A or B is 128 contiguous bytes a step: 8 threads' 16-byte loads), sg32db with DB.
// K64, SG4 and WIDE fetch 4 groups per thread (of B, for WIDE), so they pack as LEAN does.
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_cooperative_matrix : require
#define TILE_M 128u  // gemm_build.glsl and the kernels' main() take TILE_M x TILE_N tiles
#ifdef COOP_WIDE
#define TILE_N 256u
#define NG_SHIFT 5u  // groups of 8 n per row of a row-major B
#elif defined(COOP_SG32)
#define TILE_N 64u
#define NG_SHIFT 3u
#else
#define TILE_N 128u
#define NG_SHIFT 4u
#endif
#define NG_MASK ((1u << NG_SHIFT) - 1u)
#ifdef COOP_K64
#define TILE_K 64u
#define K_ROW 9u  // uvec4 per row of 64 k (8, + 1 of padding)
#define KG_SHIFT 3u
#else
#define TILE_K 32u
#define K_ROW 5u  // uvec4 per row of 32 k (4, + 1 of padding)
#define KG_SHIFT 2u
#endif
#define KG_MASK ((1u << KG_SHIFT) - 1u)  // groups of 8 k per shared row
#define N_ROW ((TILE_N >> 3) + 1u)       // uvec4 per row of a row-major B (TILE_N / 8, + 1 of padding)
#if defined(COOP_SG4) || defined(COOP_WIDE)
#define ACC_N 4u  // accumulators across n per subgroup
#else
#define ACC_N 2u
#endif
#ifdef COOP_SG32
#define ACC_M 2u  // and down m
#else
#define ACC_M 4u
#endif
#define SG_COLS (TILE_N / 16u / ACC_N)  // subgroups across the tile
#define SG_ROWS (TILE_M / 16u / ACC_M)  // and down it
#define THREADS (SG_ROWS * SG_COLS * 32u)
#define SG_M(sg) ((sg) / SG_COLS * 16u * ACC_M)
#define SG_N(sg) ((sg) % SG_COLS * 16u * ACC_N)
#define PER_A (TILE_M * TILE_K / 8u / THREADS)  // groups of 8 values of A a thread fetches
#define PER_B (TILE_N * TILE_K / 8u / THREADS)
#if defined(COOP_K64) || defined(COOP_SG4) || defined(COOP_LEAN) || defined(COOP_WIDE)
#define PACK_AT_FETCH
#endif
#ifdef COOP_DB
#if defined(COOP_K64) || defined(COOP_WIDE) || defined(COOP_SH_F16)
#error "COOP_DB: over 48 KiB with K64 or WIDE; stages through sh_a as uvec4"
#endif
#define STAGES 2u
#else
#define STAGES 1u
#endif

// Shared memory in SH_T, SH_E of them a uvec4 (8 float16 values).
#if defined(COOP_SH_F16)
#define SH_T float16_t
#define SH_E 8u
#define PUT(buf, at, v) \
    [[unroll]] for (uint i_ = 0u; i_ < 8u; ++i_) buf[(at) * 8u + i_] = unpackFloat2x16(v[i_ / 2u])[i_ % 2u];
#else
#define SH_T uvec4
#define SH_E 1u
#define PUT(buf, at, v) buf[at] = v;
#endif
#define A_STAGE (TILE_M * K_ROW)  // uvec4 per stage of A
#define B_STAGE (TILE_N * K_ROW)  // and of B (a row-major B needs TILE_K * N_ROW, less)
shared SH_T sh_a[STAGES * A_STAGE * SH_E];
shared SH_T sh_b[STAGES * B_STAGE * SH_E];
void put_a(uint at, uvec4 v) { PUT(sh_a, at, v) }
void put_b(uint at, uvec4 v) { PUT(sh_b, at, v) }
#ifndef COOP_DB
shared float staged[THREADS / 32u * 256u];  // one 16x16 accumulator per subgroup, for the epilogue
#endif
// (COOP_DB stages them in sh_a, else it would take 48 KiB.)

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
// its k is contiguous, else row k, n .. n+7 at shared row g >> NG_SHIFT. A step of 64 k may pass the end of a
// split-K slice (multiples of 32): 16-byte loads only inside it (k < K), zeros past it.
uvec4 vec_a[PER_A], vec_b[PER_B];
#ifndef PACK_AT_FETCH
float one_a[PER_A][8], one_b[PER_B][8];
bool is_vec_a[PER_A], is_vec_b[PER_B];
#endif

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
#ifdef PACK_AT_FETCH
        if (!vec) vec_a[r] = pack8(v);
#else
        is_vec_a[r] = vec;
        one_a[r] = v;
#endif
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
#ifdef PACK_AT_FETCH
        if (!vec) vec_b[r] = pack8(v);
#else
        is_vec_b[r] = vec;
        one_b[r] = v;
#endif
    }
}

void stash(uint stage, bool b_k_fast) {
    [[unroll]] for (uint r = 0u; r < PER_A; ++r) {
        const uint g = gl_LocalInvocationIndex + THREADS * r;
#ifdef PACK_AT_FETCH
        const uvec4 a = vec_a[r];
#else
        const uvec4 a = is_vec_a[r] ? vec_a[r] : pack8(one_a[r]);
#endif
        put_a(stage * A_STAGE + (g >> KG_SHIFT) * K_ROW + (g & KG_MASK), a);
    }
    [[unroll]] for (uint r = 0u; r < PER_B; ++r) {
        const uint g = gl_LocalInvocationIndex + THREADS * r;
#ifdef PACK_AT_FETCH
        const uvec4 b = vec_b[r];
#else
        const uvec4 b = is_vec_b[r] ? vec_b[r] : pack8(one_b[r]);
#endif
        if (b_k_fast)
            put_b(stage * B_STAGE + (g >> KG_SHIFT) * K_ROW + (g & KG_MASK), b);
        else
            put_b(stage * B_STAGE + (g >> NG_SHIFT) * N_ROW + (g & NG_MASK), b);
    }
}

void gemm(uint m0, uint n0, uint M, uint N, uint k_begin, uint K, bool a_k_fast, bool b_k_fast) {
    const uint sg = gl_SubgroupID;
    const uint wm = SG_M(sg), wn = SG_N(sg);  // this subgroup's block of the tile
    MatSum acc[ACC_M][ACC_N];
    [[unroll]] for (uint i = 0u; i < ACC_M; ++i)
        [[unroll]] for (uint j = 0u; j < ACC_N; ++j) acc[i][j] = MatSum(ZERO);
    fetch(m0, n0, k_begin, M, N, K, b_k_fast);
#ifdef COOP_DB
    stash(0u, b_k_fast);
    barrier();
    uint stage = 0u;
#else
    const uint stage = 0u;
#endif
    for (uint k0 = k_begin; k0 < K; k0 += TILE_K) {
#ifndef COOP_DB
        barrier();  // the previous step's matrix loads are done with shared memory
        stash(stage, b_k_fast);
        barrier();
#endif
        if (k0 + TILE_K < K) fetch(m0, n0, k0 + TILE_K, M, N, K, b_k_fast);
        const uint s = stage * A_STAGE, sb = stage * B_STAGE;
        [[unroll]] for (uint kk = 0u; kk < TILE_K; kk += 16u) {
            MatA a[ACC_M];
            MatB b[ACC_N];
            [[unroll]] for (uint i = 0u; i < ACC_M; ++i)
                coopMatLoad(a[i], sh_a, (s + (wm + 16u * i) * K_ROW + kk / 8u) * SH_E, K_ROW * SH_E,
                            gl_CooperativeMatrixLayoutRowMajor);
            if (b_k_fast) {
                [[unroll]] for (uint j = 0u; j < ACC_N; ++j)
                    coopMatLoad(b[j], sh_b, (sb + (wn + 16u * j) * K_ROW + kk / 8u) * SH_E, K_ROW * SH_E,
                                gl_CooperativeMatrixLayoutColumnMajor);
            } else {
                [[unroll]] for (uint j = 0u; j < ACC_N; ++j)
                    coopMatLoad(b[j], sh_b, (sb + kk * N_ROW + (wn + 16u * j) / 8u) * SH_E, N_ROW * SH_E,
                                gl_CooperativeMatrixLayoutRowMajor);
            }
            [[unroll]] for (uint i = 0u; i < ACC_M; ++i)
                [[unroll]] for (uint j = 0u; j < ACC_N; ++j) acc[i][j] = coopMatMulAdd(a[i], b[j], acc[i][j]);
        }
#ifdef COOP_DB
        if (k0 + TILE_K < K) stash(stage ^ 1u, b_k_fast);
        barrier();  // this stage's loads are done, the other stage's stores visible
        stage ^= 1u;
#endif
    }
    [[unroll]] for (uint i = 0u; i < ACC_M; ++i)
        [[unroll]] for (uint j = 0u; j < ACC_N; ++j) {
#ifdef COOP_DB
            // 16 floats a row: 4 uvec4 of sh_a, which the loop's last barrier freed.
            const uint base = sg * 64u;
            coopMatStore(MatOut(acc[i][j]), sh_a, base, 4u, gl_CooperativeMatrixLayoutRowMajor);
#define STAGED(e) uintBitsToFloat(sh_a[base + (e) / 4u][(e) % 4u])
#else
            const uint base = sg * 256u;
            coopMatStore(MatOut(acc[i][j]), staged, base, 16u, gl_CooperativeMatrixLayoutRowMajor);
#define STAGED(e) staged[base + (e)]
#endif
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            for (uint e = gl_SubgroupInvocationID; e < 256u; e += gl_SubgroupSize) {
                const uint m = m0 + wm + 16u * i + e / 16u, n = n0 + wn + 16u * j + e % 16u;
                if (m < M && n < N) store_c(m, n, STAGED(e));
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();  // the next accumulator overwrites this one's staging
        }
}
