// One tile of a product C[m, n] = sum_k A(m, k) B(k, n) on the matrix units (tensor cores) through
// VK_KHR_cooperative_matrix or VK_NV_cooperative_matrix (below): float16 operands, float32 sums. Same interface as
// gemm_micro.glsl: the including shader defines load_a(m, k), load_b(k, n) and store_c(m, n, sum) first, and may
// define HAS_LOAD8 with load_a8(m, k, v) / load_b8(k, n, k_fast, v): 8 float16 values along k (along n for B when
// !k_fast) as one 16-byte load, returning false where it cannot (then the values are read one by one).
// Used only where the host found an extension with 16x16x16 float16 x float16 + float32 matrices and 32-wide
// subgroups (physical_devices.cpp). Operands are rounded to float16 into shared memory, 8 to a uvec4 (the matrix
// loads' natural unit), and multiplied from there; float32 operands (attention's probabilities) are rounded too, as
// the CUDA path rounds them. Shared rows are padded by 16 bytes against bank conflicts. Each accumulator is staged
// through shared memory for the epilogue, so bounds, strides, bias and the output type are the including shader's.
// Geometry, by the kernel's defines (kernels.cmake; KILN_VULKAN_COOP picks one, vulkan_backend.cpp):
//   (none, "base")  128x128 tiles, 8 subgroups (2 x 4) of 64x32, 4 x 2 accumulators each.
//   COOP_SG32       128x64 tiles, 8 subgroups (4 x 2) of 32x32, 2 x 2 accumulators: half the accumulator registers
//                   (128-145 against 232-237 on NVIDIA's driver), the convolutions 25-35% faster on the H200. The
//                   default on KHR builds (docs/VULKAN.md).
//   COOP_F16_SUMS   base with float16 accumulators (KHR only), measurement only, never a default: 2^-11 per
//                   addition, overflow past 65504.
//   COOP_SG32 + COOP_WIDE  128x128 tiles, 16 subgroups (4 x 4) of 32x32 (512 threads): half the device-memory
//                   traffic a product of sg32's tiles, the same registers; the measured choice times it beside sg32
//                   per shape (VulkanDeviceOps::run_product; session 21, H200: UNet call 35.6-36.8 -> 33.6-33.8 ms).
// Sessions 18-19 measured and removed others (k steps of 64, 4 subgroups of 64x64, 128x256 tiles, two shared
// stages, float16 shared memory, a packed-only prefetch, and sg32 with each): none faster (docs/VULKAN.md).
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require
#define TILE_M 128u  // gemm_build.glsl and the kernels' main() take TILE_M x TILE_N tiles
#if defined(COOP_SG32) && defined(COOP_WIDE)  // 128x128 tiles of 32x32 blocks, 16 subgroups
#define TILE_N 128u
#define NG_SHIFT 4u
#define ACC_M 2u
#elif defined(COOP_SG32)
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

// COOP_KHR builds it on VK_KHR_cooperative_matrix (AMD RDNA3's WMMA, Intel's XMX, NVIDIA), which needs
// glslang 13 or later; otherwise on VK_NV_cooperative_matrix (NVIDIA only), which Debian 12's glslc compiles.
// The two differ in names only: matrices of A, B and sums; loads with a row- or column-major layout; stores.
#ifdef COOP_KHR
#extension GL_KHR_cooperative_matrix : require
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
#define load_row_major(m, buf, at, stride) coopMatLoad(m, buf, at, stride, gl_CooperativeMatrixLayoutRowMajor)
#define load_column_major(m, buf, at, stride) coopMatLoad(m, buf, at, stride, gl_CooperativeMatrixLayoutColumnMajor)
#define mul_add(a, b, c) coopMatMulAdd(a, b, c)
#define store_row_major(m, buf, at, stride) coopMatStore(m, buf, at, stride, gl_CooperativeMatrixLayoutRowMajor)
#else
#extension GL_NV_cooperative_matrix : require
#if defined(COOP_SG32) || defined(COOP_F16_SUMS)
#error "the sg32 and f16acc tiles are KHR builds (kernels.cmake)"
#endif
#define MatA fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define MatB fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define MatSum fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define MatOut MatSum
#define ZERO 0.0
#define load_row_major(m, buf, at, stride) coopMatLoadNV(m, buf, at, stride, false)
#define load_column_major(m, buf, at, stride) coopMatLoadNV(m, buf, at, stride, true)
#define mul_add(a, b, c) coopMatMulAddNV(a, b, c)
#define store_row_major(m, buf, at, stride) coopMatStoreNV(m, buf, at, stride, false)
#endif

// A value or 0 past the matrix's edge, and 8 values rounded to float16 and packed into a uvec4 (shared memory's unit).
float a_or_0(uint m, uint k, uint M, uint K) { return (m < M && k < K) ? load_a(m, k) : 0.0; }
float b_or_0(uint k, uint n, uint N, uint K) { return (n < N && k < K) ? load_b(k, n) : 0.0; }
uvec4 pack8(float v[8]) {
    return uvec4(packFloat2x16(f16vec2(v[0], v[1])), packFloat2x16(f16vec2(v[2], v[3])),
                 packFloat2x16(f16vec2(v[4], v[5])), packFloat2x16(f16vec2(v[6], v[7])));
}

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

// The matrices are named one by one (acc00, acc01, ..., a0, b0, ...), never held in arrays: NVIDIA's Vulkan driver
// (580) runs multiply-adds on an array of cooperative matrices some 16x slower than on named ones (session 20: a
// loop of nothing but multiply-adds, 33 against 541 TFLOP/s; docs/VULKAN.md). FOR_MN / FOR_M / FOR_N spell out the
// geometry's accumulators.
#ifdef COOP_SG32  // ACC_M 2
#define FOR_M(X) X(0) X(1)
#define FOR_MN(X) X(0, 0) X(0, 1) X(1, 0) X(1, 1)
#else  // ACC_M 4
#define FOR_M(X) X(0) X(1) X(2) X(3)
#define FOR_MN(X) X(0, 0) X(0, 1) X(1, 0) X(1, 1) X(2, 0) X(2, 1) X(3, 0) X(3, 1)
#endif
#define FOR_N(X) X(0) X(1)  // ACC_N is 2 in every geometry
#define DECLARE_SUM(i, j) MatSum acc##i##j = MatSum(ZERO);
#define DECLARE_A(i) MatA a##i;
#define DECLARE_B(j) MatB b##j;
#define LOAD_A(i) load_row_major(a##i, sh_a, (wm + 16u * i) * K_ROW + kk / 8u, K_ROW);
#define LOAD_B_K_FAST(j) load_column_major(b##j, sh_b, (wn + 16u * j) * K_ROW + kk / 8u, K_ROW);
#define LOAD_B_N_FAST(j) load_row_major(b##j, sh_b, kk * N_ROW + (wn + 16u * j) / 8u, N_ROW);
#define MUL_ADD(i, j) acc##i##j = mul_add(a##i, b##j, acc##i##j);
#define STORE_SUM(i, j) store_sum(MatOut(acc##i##j), m0 + wm + 16u * i, n0 + wn + 16u * j, M, N);

// One 16x16 sum through this subgroup's staging into the including shader's store_c, from row m and column n.
void store_sum(MatOut sum, uint m, uint n, uint M, uint N) {
    const uint base = gl_SubgroupID * 256u;
    store_row_major(sum, staged, base, 16u);
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    for (uint e = gl_SubgroupInvocationID; e < 256u; e += gl_SubgroupSize)
        if (m + e / 16u < M && n + e % 16u < N) store_c(m + e / 16u, n + e % 16u, staged[base + e]);
    subgroupMemoryBarrierShared();
    subgroupBarrier();  // the next sum overwrites this one's staging
}

void gemm(uint m0, uint n0, uint M, uint N, uint k_begin, uint K, bool a_k_fast, bool b_k_fast) {
    const uint sg = gl_SubgroupID;
    const uint wm = SG_M(sg), wn = SG_N(sg);  // this subgroup's block of the tile
    FOR_MN(DECLARE_SUM)
    FOR_M(DECLARE_A)
    FOR_N(DECLARE_B)
    fetch(m0, n0, k_begin, M, N, K, b_k_fast);
    for (uint k0 = k_begin; k0 < K; k0 += TILE_K) {
        barrier();  // the previous step's matrix loads are done with shared memory
        stash(b_k_fast);
        barrier();
        if (k0 + TILE_K < K) fetch(m0, n0, k0 + TILE_K, M, N, K, b_k_fast);
        [[unroll]] for (uint kk = 0u; kk < TILE_K; kk += 16u) {
            FOR_M(LOAD_A)
            if (b_k_fast) {
                FOR_N(LOAD_B_K_FAST)
            } else {
                FOR_N(LOAD_B_N_FAST)
            }
            FOR_MN(MUL_ADD)
        }
    }
    FOR_MN(STORE_SUM)
}
