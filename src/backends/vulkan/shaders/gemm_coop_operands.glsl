// The operand helpers of the matrix-unit products (gemm_coop.glsl and its variants, gemm_coop_variants.glsl):
// a value or 0 past the matrix's edge, and 8 values rounded to float16 and packed into a uvec4, the unit the
// tiles keep in shared memory. The including shader defines load_a and load_b first.
float a_or_0(uint m, uint k, uint M, uint K) { return (m < M && k < K) ? load_a(m, k) : 0.0; }
float b_or_0(uint k, uint n, uint N, uint K) { return (n < N && k < K) ? load_b(k, n) : 0.0; }
uvec4 pack8(float v[8]) {
    return uvec4(packFloat2x16(f16vec2(v[0], v[1])), packFloat2x16(f16vec2(v[2], v[3])),
                 packFloat2x16(f16vec2(v[4], v[5])), packFloat2x16(f16vec2(v[6], v[7])));
}
