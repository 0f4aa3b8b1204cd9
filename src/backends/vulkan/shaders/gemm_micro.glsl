// gemm() for the builds whose threads each keep a MICRO_M x MICRO_N block of the tile in registers
// (gemm_tile.glsl, gemm_tile_small.glsl, gemm_direct.glsl; include one of them first; square blocks define
// MICRO alone): accumulate, then hand every element inside the product to the including shader's store_c(m, n, sum).
#ifndef MICRO_M
#define MICRO_M MICRO
#define MICRO_N MICRO
#endif
void gemm(uint m0, uint n0, uint M, uint N, uint k_begin, uint K, bool a_k_fast, bool b_k_fast) {
    float acc[MICRO_M][MICRO_N];
    [[unroll]] for (uint i = 0u; i < MICRO_M; ++i)
        [[unroll]] for (uint j = 0u; j < MICRO_N; ++j) acc[i][j] = 0.0;
    gemm_tile(m0, n0, M, N, k_begin, K, a_k_fast, b_k_fast, acc);
    [[unroll]] for (uint i = 0u; i < MICRO_M; ++i) {
        const uint m = m0 + micro_row(i);
        [[unroll]] for (uint j = 0u; j < MICRO_N; ++j) {
            const uint n = n0 + micro_col(j);
            if (m < M && n < N) store_c(m, n, acc[i][j]);
        }
    }
}
