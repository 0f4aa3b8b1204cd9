// dst = the values of block-format weights (Q8_0 ... Q6_K, Q2_K, Q3_K), each decoded in float32 as the host's decoders do
// (quant/block_formats.h, quant/k_quants.h; reading the blocks: blocks.glsl), then rounded once to dst's type
// (T_F16: float16, else float32; the float32 build needs no 16-bit storage). One invocation per value; the PACK8 (q8_0)
// and PACK8K (k-quants) builds take 8 values an invocation into float16. `precise`
// keeps q * d + m and step * q - off two roundings, as on the host: float32 results are the host's bit for bit.
#version 450
#include "common.glsl"
#include "blocks.glsl"
layout(local_size_x = 256) in;
// format: 0 q8_0, 1 q4_0, 2 q4_1, 3 q5_0, 4 q5_1, 5 q4_K, 6 q5_K, 7 q6_K, 8 q2_K, 9 q3_K (VulkanBackend::convert)
layout(push_constant) uniform Params { U32s src; Ts dst; uint n; uint format; } p;

uint byte_at(uint off) { return block_byte(p.src, off); }
int int8_at(uint off) { return block_int8(p.src, off); }
float half_at(uint off) { return block_half(p.src, off); }
// Sub-block s's 6-bit scale and minimum of a q4_K/q5_K block whose 12 scale bytes start at q.
void k_scale_min(uint q, uint s, out uint sc, out uint m) {
    if (s < 4u) {
        sc = byte_at(q + s) & 63u;
        m = byte_at(q + s + 4u) & 63u;
    } else {
        sc = (byte_at(q + s + 4u) & 15u) | ((byte_at(q + s - 4u) >> 6) << 4);
        m = (byte_at(q + s + 4u) >> 4) | ((byte_at(q + s) >> 6) << 4);
    }
}
// Value j's code in a 32-value block with 16 bytes of nibbles at qs: low nibble j, high nibble j + 16.
uint nibble(uint qs, uint j) { return (byte_at(qs + (j & 15u)) >> (j < 16u ? 0u : 4u)) & 15u; }
uint fifth_bit(uint qh, uint j) { return (byte_at(qh + (j >> 3)) >> (j & 7u)) & 1u; }

// Values i0 .. i0 + n - 1 (n <= 8, all in one 16-value sub-block) of a k-quant (formats 5 .. 9), the sub-block's
// scale (and offset) read once: value() takes one, the PACK8K build 8.
void k_values(uint i0, uint n, out float v[8]) {
    const uint j = i0 & 255u, part = j >> 5, l0 = j & 31u;
    if (p.format == 8u) {  // q2_K, 84 bytes: 2-bit codes at bits 2 (part % 4) of byte 32 (part / 4) + l
        const uint b = (i0 >> 8) * 84u, s = byte_at(b + j / 16u);
        const float step = half_at(b + 80u) * float(s & 15u), off = half_at(b + 82u) * float(s >> 4);
        for (uint e = 0u; e < n; ++e) {
            const uint code = (byte_at(b + 16u + 32u * (part >> 2) + l0 + e) >> (2u * (part & 3u))) & 3u;
            precise float x = step * float(code) - off;
            v[e] = x;
        }
        return;
    }
    if (p.format == 9u) {  // q3_K, 110 bytes: the same 2-bit codes at byte 32, the third bit at bit part of hmask[l]
        const uint b = (i0 >> 8) * 110u, s = j / 16u;
        const uint low = s < 8u ? byte_at(b + 96u + s) & 15u : byte_at(b + 88u + s) >> 4;
        const int sc = int(low | (((byte_at(b + 104u + (s & 3u)) >> (2u * (s >> 2))) & 3u) << 4)) - 32;
        const float step = half_at(b + 108u) * float(sc);
        for (uint e = 0u; e < n; ++e) {
            const uint l = l0 + e;
            const int code = int((byte_at(b + 32u + 32u * (part >> 2) + l) >> (2u * (part & 3u))) & 3u) -
                             (((byte_at(b + l) >> part) & 1u) != 0u ? 0 : 4);
            v[e] = step * float(code);
        }
        return;
    }
    if (p.format == 7u) {  // q6_K, 210 bytes: half h, quarter k of 32 values
        const uint b = (i0 >> 8) * 210u, h = part >> 2, k = part & 3u;
        const float step = half_at(b + 208u) * float(int8_at(b + 192u + j / 16u));
        for (uint e = 0u; e < n; ++e) {
            const uint l = l0 + e, lo = byte_at(b + 64u * h + l + 32u * (k & 1u));
            const uint q = ((k < 2u ? lo : lo >> 4) & 15u) | (((byte_at(b + 128u + 32u * h + l) >> (2u * k)) & 3u) << 4);
            v[e] = step * float(int(q) - 32);
        }
        return;
    }
    // q4_K (144 bytes) / q5_K (176): part's nibbles are the low (even part) or high (odd) ones of group part / 2
    const bool five = p.format == 6u;
    const uint b = (i0 >> 8) * (five ? 176u : 144u);
    uint sc, m;
    k_scale_min(b + 4u, part, sc, m);
    const float step = half_at(b) * float(sc), off = half_at(b + 2u) * float(m);
    for (uint e = 0u; e < n; ++e) {
        const uint l = l0 + e, byte = byte_at(b + (five ? 48u : 16u) + 32u * (part >> 1) + l);
        uint q = (part & 1u) != 0u ? byte >> 4 : byte & 15u;
        if (five) q |= ((byte_at(b + 16u + l) >> part) & 1u) << 4;
        precise float x = step * float(q) - off;
        v[e] = x;
    }
}

float value(uint i) {
    if (p.format <= 4u) {
        const uint bytes[5] = uint[5](34u, 18u, 20u, 22u, 24u);
        const uint b = (i >> 5) * bytes[p.format], j = i & 31u;
        const float d = half_at(b);
        if (p.format == 0u) return q8_0_value(p.src, i);
        if (p.format == 1u) return float(int(nibble(b + 2u, j)) - 8) * d;
        if (p.format == 2u) {
            precise float v = float(nibble(b + 4u, j)) * d + half_at(b + 2u);
            return v;
        }
        if (p.format == 3u) return float(int(nibble(b + 6u, j) | (fifth_bit(b + 2u, j) << 4)) - 16) * d;
        precise float v = float(nibble(b + 8u, j) | (fifth_bit(b + 4u, j) << 4)) * d + half_at(b + 2u);
        return v;
    }
    float v[8];
    k_values(i, 1u, v);
    return v[0];
}

#if defined(PACK8K)
// A k-quant (formats 5 .. 9) to float16, 8 values an invocation (the host's choice where dst is 16-byte aligned): the
// sub-block's scale read once for 8, one 16-byte store (session 26: the per-value path read them for each value).
// p.n counts groups of 8 here.
layout(buffer_reference, std430, buffer_reference_align = 16) buffer U128s { uvec4 v[]; };
void main() {
    FOR_EACH_ELEMENT(g, p.n) {
        float v[8];
        k_values(g * 8u, 8u, v);
        U128s(p.dst).v[g] = uvec4(packFloat2x16(f16vec2(v[0], v[1])), packFloat2x16(f16vec2(v[2], v[3])),
                                  packFloat2x16(f16vec2(v[4], v[5])), packFloat2x16(f16vec2(v[6], v[7])));
    }
}
#elif defined(PACK8)
// q8_0 to float16, 8 values an invocation, one 16-byte store (the host's choice where dst is 16-byte aligned): the
// per-value path read two words and stored two bytes for each value. p.n counts groups of 8 here.
layout(buffer_reference, std430, buffer_reference_align = 16) buffer U128s { uvec4 v[]; };
void main() {
    FOR_EACH_ELEMENT(g, p.n) U128s(p.dst).v[g] = q8_0_pack8(p.src, g * 8u);
}
#else
void main() {
    FOR_EACH_ELEMENT(i, p.n) st(p.dst, i, value(i));
}
#endif
