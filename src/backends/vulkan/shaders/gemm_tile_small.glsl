// One 64x64 tile of a product C[m, n] = sum_k A(m, k) B(k, n): gemm_tile.glsl's interface with smaller
// tiles, for products too small or too narrow to fill a GPU with 128x128 tiles (the backend times both).
// 16x16 threads; each accumulates a 4x4 block in float32 (rows ty + 16 i, columns tx + 16 j, so that
// neighbouring threads store neighbouring columns). The including shader defines load_a(m, k) and
// load_b(k, n) before including this file; a_k_fast / b_k_fast say which index is contiguous in memory, so
// that neighbouring threads load neighbouring addresses when filling the shared tiles.
#extension GL_EXT_control_flow_attributes : require
#define TILE 64u
#define TILE_K 16u
#define MICRO 4u

uint micro_row(uint i) { return gl_LocalInvocationID.y + 16u * i; }
uint micro_col(uint j) { return gl_LocalInvocationID.x + 16u * j; }
shared float tile_a[TILE_K][TILE + 1u];
shared float tile_b[TILE_K][TILE + 1u];

void gemm_tile(uint m0, uint n0, uint M, uint N, uint k_begin, uint K, bool a_k_fast, bool b_k_fast, inout float acc[MICRO][MICRO]) {
    const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, tid = ty * 16u + tx;
    for (uint k0 = k_begin; k0 < K; k0 += TILE_K) {
        [[unroll]] for (uint r = 0u; r < 4u; ++r) {
            const uint e = tid + 256u * r;
            uint kk = a_k_fast ? e % TILE_K : e / TILE;
            const uint mm = a_k_fast ? e / TILE_K : e % TILE;
            tile_a[kk][mm] = (m0 + mm < M && k0 + kk < K) ? load_a(m0 + mm, k0 + kk) : 0.0;
            kk = b_k_fast ? e % TILE_K : e / TILE;
            const uint nn = b_k_fast ? e / TILE_K : e % TILE;
            tile_b[kk][nn] = (n0 + nn < N && k0 + kk < K) ? load_b(k0 + kk, n0 + nn) : 0.0;
        }
        barrier();
        [[unroll]] for (uint kk = 0u; kk < TILE_K; ++kk) {
            float a[4], b[4];
            [[unroll]] for (uint i = 0u; i < 4u; ++i) a[i] = tile_a[kk][ty + 16u * i];
            [[unroll]] for (uint j = 0u; j < 4u; ++j) b[j] = tile_b[kk][tx + 16u * j];
            [[unroll]] for (uint i = 0u; i < 4u; ++i)
                [[unroll]] for (uint j = 0u; j < 4u; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
        }
        barrier();
    }
}
