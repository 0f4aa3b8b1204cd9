// A product without shared memory or barriers, for devices that run on the CPU (lavapipe): there
// workgroup barriers are coroutine switches and shared memory is ordinary memory, so the tiled kernel
// (gemm_tile.glsl) is slow while caches serve direct reads well. 8x8 threads per workgroup, each computing
// a 4x4 block of a 32x32 tile: rows ty + 8 i, columns tx + 8 j. Same interface as gemm_tile.
#extension GL_EXT_control_flow_attributes : require
#define TILE 32u
#define MICRO 4u
#define THREADS 8u

uint micro_row(uint i) { return gl_LocalInvocationID.y + THREADS * i; }
uint micro_col(uint j) { return gl_LocalInvocationID.x + THREADS * j; }

void gemm_tile(uint m0, uint n0, uint M, uint N, uint k_begin, uint K, bool a_k_fast, bool b_k_fast, inout float acc[MICRO][MICRO]) {
    uint rows[4], cols[4];
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
        rows[i] = min(m0 + micro_row(i), M - 1u);  // clamped: out-of-range rows and columns are never stored
        cols[i] = min(n0 + micro_col(i), N - 1u);
    }
    for (uint k = k_begin; k < K; ++k) {
        float a[4], b[4];
        [[unroll]] for (uint i = 0u; i < 4u; ++i) a[i] = load_a(rows[i], k);
        [[unroll]] for (uint j = 0u; j < 4u; ++j) b[j] = load_b(k, cols[j]);
        [[unroll]] for (uint i = 0u; i < 4u; ++i)
            [[unroll]] for (uint j = 0u; j < 4u; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
    }
}
