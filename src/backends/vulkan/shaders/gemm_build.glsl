// The build of a product kernel, chosen by its defines (kernels.cmake): COOP, matrix units
// (gemm_coop.glsl, in the geometry its defines choose); DIRECT, no shared memory, for
// devices that run on the CPU; SMALL, 64x64 tiles; else 128x128 tiles (64x128 or 128x64 with TILE_ROWS_64 or
// TILE_COLS_64). Each provides gemm(m0, n0, M, N,
// k_begin, K, a_k_fast, b_k_fast), the sum over k in [k_begin, K) for the tile at (m0, n0), and TILE, its
// size (or TILE_M x TILE_N); the including shader defines load_a, load_b and store_c first, and
// partial(m, n, slice) for sum_slices.
#if defined(COOP)
#include "gemm_coop.glsl"
#else
#if defined(DIRECT)
#include "gemm_direct.glsl"
#elif defined(SMALL)
#include "gemm_tile_small.glsl"
#else
#include "gemm_tile.glsl"
#endif
#include "gemm_micro.glsl"
#endif
#ifndef TILE_M  // tiles of TILE_M x TILE_N: square but for gemm_tile.glsl's and gemm_coop.glsl's other geometries
#define TILE_M TILE
#define TILE_N TILE
#endif

// Split-K (VulkanDeviceOps::split_k): a product with too few tiles to fill the GPU runs its slices of k as
// separate workgroups, each leaving float32 sums in a workspace (store_c writes them there); this second
// pass adds a tile's slices in order and stores each element through store_c.
void sum_slices(uint m0, uint n0, uint M, uint N, uint slices) {
    const uint threads = gl_WorkGroupSize.x * gl_WorkGroupSize.y;
    for (uint e = gl_LocalInvocationIndex; e < TILE_M * TILE_N; e += threads) {
        const uint m = m0 + e / TILE_N, n = n0 + e % TILE_N;
        if (m < M && n < N) {
            float sum = 0.0;
            for (uint s = 0u; s < slices; ++s) sum += partial(m, n, s);
            store_c(m, n, sum);
        }
    }
}
