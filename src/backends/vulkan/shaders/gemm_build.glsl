// The build of a product kernel, chosen by its defines (kernels.cmake): COOP, matrix units
// (gemm_coop.glsl); DIRECT, no shared memory, for devices that run on the CPU; SMALL, 64x64 tiles; else
// 128x128 tiles. Each provides gemm(m0, n0, M, N, K, a_k_fast, b_k_fast) over the tile at (m0, n0) and
// TILE, its size; the including shader defines load_a, load_b and store_c first.
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
