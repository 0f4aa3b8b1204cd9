// One tile of a product C[m, n] = sum_k A(m, k) B(k, n), shared by matmul.comp and conv2d.comp, for GPUs:
// 128x128 by default, 64x128 with TILE_ROWS_64 and 128x64 with TILE_COLS_64 (rows x columns: products whose
// rows or columns end 64 past a multiple of 128, as SD's 320 channels, compute no empty half-tile there; the
// backend times the builds, session 25). 16x16 threads; each accumulates a (TILE_M / 16) x (TILE_N / 16) block in
// float32: rows 4 ty + (0..3) and 64 + 4 ty + (0..3), columns likewise with tx, so that its operands are vec4
// reads from shared memory and neighbouring threads store neighbouring columns. The including shader defines
// load_a(m, k) and load_b(k, n) before including this file; a_k_fast / b_k_fast say which index is contiguous in
// memory, so that neighbouring threads load neighbouring addresses when filling the shared tiles.
#extension GL_EXT_control_flow_attributes : require
#if defined(TILE_ROWS_64)
#define TILE_M 64u
#define TILE_N 128u
#elif defined(TILE_COLS_64)
#define TILE_M 128u
#define TILE_N 64u
#else
#define TILE_M 128u
#define TILE_N 128u
#endif
#define TILE_K 16u  // k per step between barriers (8 before session 22)
#define MICRO_M (TILE_M / 16u)
#define MICRO_N (TILE_N / 16u)
#define THREADS 16u
shared vec4 tile_a[TILE_K][TILE_M / 4u];
shared vec4 tile_b[TILE_K][TILE_N / 4u];

// Offsets in the tile of a thread's i-th row and j-th column.
uint micro_row(uint i) { return (i & 3u) + 4u * gl_LocalInvocationID.y + 64u * (i >> 2); }
uint micro_col(uint j) { return (j & 3u) + 4u * gl_LocalInvocationID.x + 64u * (j >> 2); }

void gemm_tile(uint m0, uint n0, uint M, uint N, uint k_begin, uint K, bool a_k_fast, bool b_k_fast,
               inout float acc[MICRO_M][MICRO_N]) {
    const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, tid = ty * THREADS + tx;
#ifdef HAS_LOAD_B4
    const bool b_by_4 = !b_k_fast;
#else
    const bool b_by_4 = false;
#endif
    for (uint k0 = k_begin; k0 < K; k0 += TILE_K) {
        // Passes over the larger operand; the smaller one is loaded in the first of them.
        [[unroll]] for (uint r = 0u; r < max(TILE_M, TILE_N) * TILE_K / 256u; ++r) {
            const uint e = tid + 256u * r;
            if (r < TILE_M * TILE_K / 256u) {
                const uint kk = a_k_fast ? e % TILE_K : e / TILE_M;
                const uint mm = a_k_fast ? e / TILE_K : e % TILE_M;
                tile_a[kk][mm >> 2][mm & 3u] = (m0 + mm < M && k0 + kk < K) ? load_a(m0 + mm, k0 + kk) : 0.0;
            }
            if (b_by_4 || r >= TILE_N * TILE_K / 256u) continue;
            const uint kk = b_k_fast ? e % TILE_K : e / TILE_N;
            const uint nn = b_k_fast ? e / TILE_K : e % TILE_N;
            tile_b[kk][nn >> 2][nn & 3u] = (n0 + nn < N && k0 + kk < K) ? load_b(k0 + kk, n0 + nn) : 0.0;
        }
#ifdef HAS_LOAD_B4
        // The including shader's 4 values along n at once (a convolution's shared index arithmetic): thread t
        // takes columns 4 (t % (TILE_N / 4)) .. + 3 of rows t / (TILE_N / 4) + (1024 / TILE_N) r of k, one vec4
        // of the shared tile each.
        if (b_by_4)
            [[unroll]] for (uint r = 0u; r < TILE_K * TILE_N / 1024u; ++r) {
                const uint kk = tid / (TILE_N / 4u) + (1024u / TILE_N) * r, n4 = tid % (TILE_N / 4u);
                const uint n = n0 + 4u * n4, k = k0 + kk;
                vec4 v = vec4(0.0);
                if (k < K && !load_b4(k, n, v))
                    [[unroll]] for (uint i = 0u; i < 4u; ++i) v[i] = n + i < N ? load_b(k, n + i) : 0.0;
                tile_b[kk][n4] = v;
            }
#endif
        barrier();
        [[unroll]] for (uint kk = 0u; kk < TILE_K; ++kk) {
            float a[MICRO_M], b[MICRO_N];
            [[unroll]] for (uint h = 0u; h < MICRO_M / 4u; ++h) {
                const vec4 v = tile_a[kk][16u * h + ty];
                a[4u * h] = v.x, a[4u * h + 1u] = v.y, a[4u * h + 2u] = v.z, a[4u * h + 3u] = v.w;
            }
            [[unroll]] for (uint h = 0u; h < MICRO_N / 4u; ++h) {
                const vec4 v = tile_b[kk][16u * h + tx];
                b[4u * h] = v.x, b[4u * h + 1u] = v.y, b[4u * h + 2u] = v.z, b[4u * h + 3u] = v.w;
            }
            [[unroll]] for (uint i = 0u; i < MICRO_M; ++i)
                [[unroll]] for (uint j = 0u; j < MICRO_N; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
        }
        barrier();
    }
}
