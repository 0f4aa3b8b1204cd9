// One 128x128 tile of a product C[m, n] = sum_k A(m, k) B(k, n), shared by matmul.comp and conv2d.comp,
// for GPUs. 16x16 threads; each accumulates an 8x8 block in float32: rows 4 ty + (0..3) and 64 + 4 ty +
// (0..3), columns likewise with tx, so that its operands are two vec4 reads from shared memory each and
// neighbouring threads store neighbouring columns. The including shader defines load_a(m, k) and
// load_b(k, n) before including this file; a_k_fast / b_k_fast say which index is contiguous in memory, so
// that neighbouring threads load neighbouring addresses when filling the shared tiles.
#extension GL_EXT_control_flow_attributes : require
#define TILE 128u
#define TILE_K 16u  // k per step between barriers (8 before session 22)
#define MICRO 8u
#define THREADS 16u
shared vec4 tile_a[TILE_K][TILE / 4u];
shared vec4 tile_b[TILE_K][TILE / 4u];

// Offsets in the tile of a thread's i-th row and j-th column.
uint micro_row(uint i) { return (i & 3u) + 4u * gl_LocalInvocationID.y + 64u * (i >> 2); }
uint micro_col(uint j) { return (j & 3u) + 4u * gl_LocalInvocationID.x + 64u * (j >> 2); }

void gemm_tile(uint m0, uint n0, uint M, uint N, uint k_begin, uint K, bool a_k_fast, bool b_k_fast,
               inout float acc[MICRO][MICRO]) {
    const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, tid = ty * THREADS + tx;
#ifdef HAS_LOAD_B4
    const bool b_by_4 = !b_k_fast;
#else
    const bool b_by_4 = false;
#endif
    for (uint k0 = k_begin; k0 < K; k0 += TILE_K) {
        [[unroll]] for (uint r = 0u; r < TILE * TILE_K / 256u; ++r) {
            const uint e = tid + 256u * r;
            uint kk = a_k_fast ? e % TILE_K : e / TILE;
            const uint mm = a_k_fast ? e / TILE_K : e % TILE;
            tile_a[kk][mm >> 2][mm & 3u] = (m0 + mm < M && k0 + kk < K) ? load_a(m0 + mm, k0 + kk) : 0.0;
            if (b_by_4) continue;
            kk = b_k_fast ? e % TILE_K : e / TILE;
            const uint nn = b_k_fast ? e / TILE_K : e % TILE;
            tile_b[kk][nn >> 2][nn & 3u] = (n0 + nn < N && k0 + kk < K) ? load_b(k0 + kk, n0 + nn) : 0.0;
        }
#ifdef HAS_LOAD_B4
        // The including shader's 4 values along n at once (a convolution's shared index arithmetic): thread t
        // takes rows t / 32 + 8 r of k and columns 4 (t % 32) .. + 3, one vec4 of the shared tile each.
        if (b_by_4)
            [[unroll]] for (uint r = 0u; r < TILE_K / 8u; ++r) {
                const uint kk = tid / 32u + 8u * r, n4 = tid % 32u, n = n0 + 4u * n4, k = k0 + kk;
                vec4 v = vec4(0.0);
                if (k < K && !load_b4(k, n, v))
                    [[unroll]] for (uint i = 0u; i < 4u; ++i) v[i] = n + i < N ? load_b(k, n + i) : 0.0;
                tile_b[kk][n4] = v;
            }
#endif
        barrier();
        [[unroll]] for (uint kk = 0u; kk < TILE_K; ++kk) {
            const vec4 a0 = tile_a[kk][ty], a1 = tile_a[kk][16u + ty];
            const vec4 b0 = tile_b[kk][tx], b1 = tile_b[kk][16u + tx];
            const float a[8] = float[8](a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w);
            const float b[8] = float[8](b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w);
            [[unroll]] for (uint i = 0u; i < MICRO; ++i)
                [[unroll]] for (uint j = 0u; j < MICRO; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
        }
        barrier();
    }
}
