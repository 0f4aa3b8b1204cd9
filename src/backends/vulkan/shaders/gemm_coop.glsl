// One 128x128 tile of a product C[m, n] = sum_k A(m, k) B(k, n) on the matrix units (tensor cores) through
// VK_KHR_cooperative_matrix or VK_NV_cooperative_matrix (below): float16 operands, float32 sums. Same interface as gemm_micro.glsl: the including
// shader defines load_a(m, k), load_b(k, n) and store_c(m, n, sum) first, and may define HAS_LOAD8 with
// load_a8(m, k, v) / load_b8(k, n, k_fast, v): 8 float16 values along k (along n for B when !k_fast) as one
// 16-byte load, returning false where it cannot (then the values are read one by one).
// Used only where the host found an extension with 16x16x16 float16 x float16 + float32 matrices and
// 32-wide subgroups (physical_devices.cpp): the 256 threads are 8 subgroups, 2 x 4 over the tile, each owning
// a 64x32 block as 4 x 2 accumulators. Operands are rounded to float16 into shared memory, 8 to a uvec4 (the
// matrix loads' natural unit), and multiplied from there; float32 operands (attention's probabilities) are
// rounded too, as the CUDA path rounds them. Shared rows are padded by 16 bytes against bank conflicts.
// Each accumulator is staged through shared memory for the epilogue, so bounds, strides, bias and the output
// type are the including shader's, as in the other builds.
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
#define TILE 128u
#define TILE_K 32u
#define K_ROW 5u   // uvec4 per row of 32 k (4, + 1 of padding)
#define N_ROW 17u  // uvec4 per row of 128 n (16, + 1 of padding)
shared uvec4 sh_a[TILE * K_ROW];  // A(m, k) at row m
// B(k, n): at row n like A when B's k is contiguous in memory (read as a column-major matrix), else at row
// k of N_ROW (row-major). Sized for the larger.
shared uvec4 sh_b[TILE * K_ROW];
shared float staged[8u * 256u];  // one 16x16 accumulator per subgroup, for the epilogue

// COOP_KHR builds it on VK_KHR_cooperative_matrix (AMD RDNA3's WMMA, Intel's XMX, NVIDIA), which needs
// glslang 13 or later; otherwise on VK_NV_cooperative_matrix (NVIDIA only), which Debian 12's glslc compiles.
// The two differ in names only: matrices of A, B and sums; loads with a row- or column-major layout; stores.
#ifdef COOP_KHR
#extension GL_KHR_cooperative_matrix : require
#define MatA coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MatB coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define MatSum coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define load_row_major(m, buf, at, stride) coopMatLoad(m, buf, at, stride, gl_CooperativeMatrixLayoutRowMajor)
#define load_column_major(m, buf, at, stride) coopMatLoad(m, buf, at, stride, gl_CooperativeMatrixLayoutColumnMajor)
#define mul_add(a, b, c) coopMatMulAdd(a, b, c)
#define store_row_major(m, buf, at, stride) coopMatStore(m, buf, at, stride, gl_CooperativeMatrixLayoutRowMajor)
#else
#extension GL_NV_cooperative_matrix : require
#define MatA fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define MatB fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define MatSum fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define load_row_major(m, buf, at, stride) coopMatLoadNV(m, buf, at, stride, false)
#define load_column_major(m, buf, at, stride) coopMatLoadNV(m, buf, at, stride, true)
#define mul_add(a, b, c) coopMatMulAddNV(a, b, c)
#define store_row_major(m, buf, at, stride) coopMatStoreNV(m, buf, at, stride, false)
#endif

#include "gemm_coop_operands.glsl"

// The next k step's operands, fetched into registers while the current step multiplies (so the loads'
// latency hides behind the matrix work), then stashed into shared memory. Each thread fills two groups of 8
// values per operand: 16-byte loads where load_a8 / load_b8 can, else 8 values read one by one and packed
// when stashed.
uvec4 vec_a[2], vec_b[2];
float one_a[2][8], one_b[2][8];
bool is_vec_a[2], is_vec_b[2];

// Group g (0..511) of an operand: A row m, k .. k+7 at shared row g / 4; B likewise when its k is
// contiguous, else B row k, n .. n+7 at shared row g / 16.
void fetch(uint m0, uint n0, uint k0, uint M, uint N, uint K, bool b_k_fast) {
    [[unroll]] for (uint r = 0u; r < 2u; ++r) {
        const uint g = gl_LocalInvocationIndex + 256u * r;
        const uint m = m0 + (g >> 2), ka = k0 + (g & 3u) * 8u;
        is_vec_a[r] = false;
#ifdef HAS_LOAD8
        is_vec_a[r] = load_a8(m, ka, vec_a[r]);
#endif
        if (!is_vec_a[r])
            [[unroll]] for (uint i = 0u; i < 8u; ++i) one_a[r][i] = a_or_0(m, ka + i, M, K);
        const uint n = b_k_fast ? n0 + (g >> 2) : n0 + (g & 15u) * 8u;
        const uint kb = b_k_fast ? k0 + (g & 3u) * 8u : k0 + (g >> 4);
        is_vec_b[r] = false;
#ifdef HAS_LOAD8
        is_vec_b[r] = load_b8(kb, n, b_k_fast, vec_b[r]);
#endif
        if (!is_vec_b[r]) {
            if (b_k_fast) {
                [[unroll]] for (uint i = 0u; i < 8u; ++i) one_b[r][i] = b_or_0(kb + i, n, N, K);
            } else {
                [[unroll]] for (uint i = 0u; i < 8u; ++i) one_b[r][i] = b_or_0(kb, n + i, N, K);
            }
        }
    }
}

void stash(bool b_k_fast) {
    [[unroll]] for (uint r = 0u; r < 2u; ++r) {
        const uint g = gl_LocalInvocationIndex + 256u * r;
        sh_a[(g >> 2) * K_ROW + (g & 3u)] = is_vec_a[r] ? vec_a[r] : pack8(one_a[r]);
        const uvec4 b = is_vec_b[r] ? vec_b[r] : pack8(one_b[r]);
        if (b_k_fast)
            sh_b[(g >> 2) * K_ROW + (g & 3u)] = b;
        else
            sh_b[(g >> 4) * N_ROW + (g & 15u)] = b;
    }
}

void gemm(uint m0, uint n0, uint M, uint N, uint k_begin, uint K, bool a_k_fast, bool b_k_fast) {
    const uint sg = gl_SubgroupID;
    const uint wm = (sg >> 2) * 64u, wn = (sg & 3u) * 32u;  // this subgroup's block of the tile
    MatSum acc[4][2];
    [[unroll]] for (uint i = 0u; i < 4u; ++i)
        [[unroll]] for (uint j = 0u; j < 2u; ++j) acc[i][j] = MatSum(0.0);
    fetch(m0, n0, k_begin, M, N, K, b_k_fast);
    for (uint k0 = k_begin; k0 < K; k0 += TILE_K) {
        barrier();  // the previous step's matrix loads are done with shared memory
        stash(b_k_fast);
        barrier();
        if (k0 + TILE_K < K) fetch(m0, n0, k0 + TILE_K, M, N, K, b_k_fast);
        [[unroll]] for (uint kk = 0u; kk < TILE_K; kk += 16u) {
            MatA a[4];
            MatB b[2];
            [[unroll]] for (uint i = 0u; i < 4u; ++i)
                load_row_major(a[i], sh_a, (wm + 16u * i) * K_ROW + kk / 8u, K_ROW);
            if (b_k_fast) {
                [[unroll]] for (uint j = 0u; j < 2u; ++j)
                    load_column_major(b[j], sh_b, (wn + 16u * j) * K_ROW + kk / 8u, K_ROW);
            } else {
                [[unroll]] for (uint j = 0u; j < 2u; ++j)
                    load_row_major(b[j], sh_b, kk * N_ROW + (wn + 16u * j) / 8u, N_ROW);
            }
            [[unroll]] for (uint i = 0u; i < 4u; ++i)
                [[unroll]] for (uint j = 0u; j < 2u; ++j) acc[i][j] = mul_add(a[i], b[j], acc[i][j]);
        }
    }
    const uint base = sg * 256u;
    [[unroll]] for (uint i = 0u; i < 4u; ++i)
        [[unroll]] for (uint j = 0u; j < 2u; ++j) {
            store_row_major(acc[i][j], staged, base, 16u);
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
