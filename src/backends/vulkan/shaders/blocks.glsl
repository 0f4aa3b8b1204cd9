// Block-format weights (Q8_0 ... Q6_K; the byte layouts are written out in quant/block_formats.h and
// quant/k_quants.h) read by shaders as 32-bit words: multi-byte fields are little-endian and may sit at any byte
// offset (an fp16 field always at an even one). Device allocations are whole 512-byte granules, so the last word
// read stays inside the buffer. Included after common.glsl.
layout(buffer_reference, std430, buffer_reference_align = 4) buffer U32s { uint v[]; };

uint block_byte(U32s b, uint off) { return (b.v[off >> 2] >> ((off & 3u) * 8u)) & 0xffu; }
int block_int8(U32s b, uint off) { return int(block_byte(b, off) << 24) >> 24; }
// The fp16 field at an even offset, as float32 exactly (denormal scales included: mantissa * 2^-24 is exact).
float block_half(U32s b, uint off) {
    const uint h = (b.v[off >> 2] >> ((off & 2u) * 8u)) & 0xffffu;
    const uint e = (h >> 10) & 31u, m = h & 1023u;
    float v;
    if (e == 0u) v = float(m) * (1.0 / 16777216.0);
    else if (e == 31u) v = uintBitsToFloat(m == 0u ? 0x7f800000u : 0x7fc00000u);
    else v = uintBitsToFloat(((e + 112u) << 23) | (m << 13));
    return (h & 0x8000u) != 0u ? -v : v;
}
// Value i of a q8_0 tensor (34-byte blocks of an fp16 scale and 32 int8 codes): exact in float32.
float q8_0_value(U32s b, uint i) {
    const uint block = (i >> 5) * 34u;
    return float(block_int8(b, block + 2u + (i & 31u))) * block_half(b, block);
}
#if defined(COOP) || defined(PACK8) || defined(PACK8K)
// The matrix-unit builds' 16-byte operand, and dequantize.comp's PACK8 build's store: values i .. i+7 of a q8_0
// tensor (i a multiple of 8, so all in one block), each the exact float32 product of code and scale rounded once
// to float16, as dequantize.comp rounds it value by value: the same float16 bits either way.
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
// The two int8 codes in the low 16 bits of `codes`, times d, as two float16 values in a word.
uint q8_0_pair(uint codes, float d) {
    const float c0 = float(int(codes << 24) >> 24), c1 = float(int(codes << 16) >> 24);
    return packFloat2x16(f16vec2(c0 * d, c1 * d));
}
uvec4 q8_0_pack8(U32s b, uint i) {
    const uint block = (i >> 5) * 34u, off = block + 2u + (i & 31u);  // off is even
    const float d = block_half(b, block);
    const uint w = off >> 2, w0 = b.v[w], w1 = b.v[w + 1u];
    // 8 code bytes from an offset of 0 or 2 within a word: a third word where they straddle.
    const uint lo = (off & 2u) == 0u ? w0 : (w0 >> 16) | (w1 << 16);
    const uint hi = (off & 2u) == 0u ? w1 : (w1 >> 16) | (b.v[w + 2u] << 16);
    return uvec4(q8_0_pair(lo, d), q8_0_pair(lo >> 16, d), q8_0_pair(hi, d), q8_0_pair(hi >> 16, d));
}
#endif
