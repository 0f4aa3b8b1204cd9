// GGUF's k-quants q2_K, q3_K, q4_K, q5_K, q6_K: 256-value blocks of sub-blocks with their own scales, quantized
// against the block's fp16 scales. Layouts (facts from ggml's ggml-common.h; the code is kiln's own):
//   q2_K (84 B): 16 B of sub-scales (low nibble sc, high nibble m, one byte per sub-block of 16), 64 B of 2-bit
//                codes, fp16 d, fp16 dmin; value = d*sc[s] * q - dmin*m[s], q in 0..3.
//   q3_K (110 B): 32 B hmask (the codes' third bits), 64 B of 2-bit codes, 12 B of 6-bit sub-scales, fp16 d;
//                value = d*(sc[s] - 32) * q, q = low bits - (third bit set ? 0 : 4), in -4..3; sub-blocks of 16.
// q2_K/q3_K: value 128h+32k+l (h < 2, k < 4, l < 32) has its 2 low bits at bits 2k, 2k+1 of code byte 32h+l, and
// (q3_K) its third bit at bit 4h+k of hmask[l]. q3_K's sub-scale s: bits 0-3 from byte s (s < 8: low nibble) or
// s-8 (high nibble), bits 4-5 from bits 2(s/4), 2(s/4)+1 of byte 8 + s%4.
//   q4_K (144 B): fp16 d, fp16 dmin, 12 B of 6-bit sub-scales sc[8] and minimums m[8], 128 B of nibbles;
//                 value = d*sc[s] * q - dmin*m[s] for the 8 sub-blocks s of 32 values.
//   q5_K (176 B): as q4_K with 32 B qh of fifth bits between the scales and the nibbles; q in 0..31.
//   q6_K (210 B): 128 B ql, 64 B qh, 16 int8 sub-scales, fp16 d; value = d*sc[s] * (q - 32), sub-blocks of 16.
// q4_K/q5_K: group g (of 4) of 64 values has 32 bytes of nibbles, value 64g+l in the low nibble of byte l and
// 64g+32+l in the high one; qh[l] bit 2g / 2g+1 is their fifth bit. Sub-scales s < 4: low 6 bits of bytes s
// (sc) and s+4 (m); s >= 4: byte s+4 holds their low 4 bits (sc low nibble, m high), the top 2 bits of bytes
// s-4 (sc) and s (m) their high bits. q6_K: half h (of 2) of 128 values: value 128h+l+32k (l < 32, k < 4) has
// its low 4 bits in ql[64h+l] (k 0: low nibble, k 2: high) or ql[64h+l+32] (k 1, 3), its high 2 bits in bits
// 2k, 2k+1 of qh[32h+l]. Dequantization computes (d*sc)*q - dmin*m in float32 as ggml and gguf-py do.
// Quantization is kiln's own (ggml's search differs, so codes may differ from ggml's; the format is the same):
// per sub-block, 13 candidate scales around range/levels, the codes of each refit by least squares (scale
// and, for q4_K/q5_K, an offset kept <= 0 as the format stores it), the best by squared error; sub-scales
// rounded to 6 (q6_K: 8) bits against d = largest/63 (127), codes rounded again against the stored scales; q2_K and
// q3_K likewise per 16 values (below).
#pragma once
#include <cstdint>

#include "quant/block_formats.h"

namespace kiln::quant {

constexpr int kKBlockValues = 256;
constexpr int kQ2_KBytes = 84, kQ3_KBytes = 110, kQ4_KBytes = 144, kQ5_KBytes = 176, kQ6_KBytes = 210;

namespace detail {

KILN_HOST_DEVICE void k_scale_min(const uint8_t* q, int s, int* sc, int* m) {
    if (s < 4) {
        *sc = q[s] & 63;
        *m = q[s + 4] & 63;
    } else {
        *sc = (q[s + 4] & 0x0f) | ((q[s - 4] >> 6) << 4);
        *m = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
    }
}

KILN_HOST_DEVICE int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

// x ~ a * q + b, q in [lo_code, hi_code]. Affine (q4_K/q5_K): codes from 0, b <= 0; symmetric (q6_K): b = 0.
KILN_HOST_DEVICE void fit_scale(const float* x, int n, int lo_code, int hi_code, bool affine, float* a_out,
                                float* b_out) {
    float lo = x[0], hi = x[0], amax = 0.0f, big = 0.0f;
    for (int i = 0; i < n; ++i) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
        if (magnitude(x[i]) > amax) amax = magnitude(x[i]), big = x[i];
    }
    if (lo > 0.0f) lo = 0.0f;
    *a_out = 0.0f;
    *b_out = affine ? lo : 0.0f;
    if (affine ? hi <= lo : amax == 0.0f) return;
    float best = -1.0f;
    for (int step = -6; step <= 6; ++step) {
        // Inverse scale: range over codes (affine), or the largest value onto the code lo_code (symmetric).
        const float inv = affine ? (float(hi_code) + 0.1f * float(step)) / (hi - lo)
                                 : (float(lo_code) - 0.1f * float(step)) / big;
        int q[32];
        float sl = 0, sl2 = 0, sx = 0, slx = 0;
        for (int i = 0; i < n; ++i) {
            q[i] = clamp_int(round_half_away((x[i] - (affine ? lo : 0.0f)) * inv), lo_code, hi_code);
            sl += float(q[i]), sl2 += float(q[i]) * float(q[i]), sx += x[i], slx += float(q[i]) * x[i];
        }
        float a = sl2 > 0.0f ? slx / sl2 : 0.0f, b = 0.0f;
        const float det = float(n) * sl2 - sl * sl;
        if (affine && det > 0.0f) {
            a = (float(n) * slx - sl * sx) / det;
            b = (sx - a * sl) / float(n);
            if (b > 0.0f) a = slx / sl2, b = 0.0f;  // the stored minimum cannot be positive
        }
        if (affine && a < 0.0f) continue;
        float err = 0.0f;
        for (int i = 0; i < n; ++i) err += (a * float(q[i]) + b - x[i]) * (a * float(q[i]) + b - x[i]);
        if (best < 0.0f || err < best) best = err, *a_out = a, *b_out = b;
    }
}

KILN_HOST_DEVICE bool all_finite(const float* x, int n) {
    for (int i = 0; i < n; ++i)
        if (!finite(x[i])) return false;
    return true;
}
KILN_HOST_DEVICE bool fp16_overflows(uint16_t h) { return (h & 0x7c00u) == 0x7c00u; }

// The affine k-quants' sub-blocks (q2_K: 16 of 16 values, q4_K/q5_K: 8 of 32): each one's fitted scale a[s] and
// minimum m[s] >= 0 (value ~ a q - m, codes 0..top), and the largest of each.
KILN_HOST_DEVICE void fit_affine_sub_blocks(const float* x, int subs, int top, float* a, float* m, float* max_a,
                                            float* max_m) {
    const int len = 256 / subs;
    *max_a = 0.0f, *max_m = 0.0f;
    for (int s = 0; s < subs; ++s) {
        fit_scale(x + len * s, len, 0, top, true, &a[s], &m[s]);
        m[s] = -m[s];
        *max_a = a[s] > *max_a ? a[s] : *max_a;
        *max_m = m[s] > *max_m ? m[s] : *max_m;
    }
}

// q4_K/q5_K: scales into block[0..16), codes 0..top into codes[256].
KILN_HOST_DEVICE bool quantize_k_affine(const float* x, int top, uint8_t* block, uint8_t* codes) {
    if (!all_finite(x, 256)) return false;
    float a[8], m[8], max_a, max_m;
    fit_affine_sub_blocks(x, 8, top, a, m, &max_a, &max_m);
    const float d = max_a / 63.0f, dmin = max_m / 63.0f;
    const uint16_t dh = float_to_half(d), mh = float_to_half(dmin);
    if (fp16_overflows(dh) || fp16_overflows(mh)) return false;
    store_u16(block, dh);
    store_u16(block + 2, mh);
    uint8_t* q = block + 4;
    for (int i = 0; i < 12; ++i) q[i] = 0;
    const float ds = half_to_float(dh), ms = half_to_float(mh);
    for (int s = 0; s < 8; ++s) {
        const int sc = d > 0.0f ? clamp_int(round_half_away(a[s] / d), 0, 63) : 0;
        const int mq = dmin > 0.0f ? clamp_int(round_half_away(m[s] / dmin), 0, 63) : 0;
        if (s < 4) {
            q[s] |= uint8_t(sc), q[s + 4] |= uint8_t(mq);
        } else {
            q[s + 4] = uint8_t((sc & 0x0f) | ((mq & 0x0f) << 4));
            q[s - 4] |= uint8_t((sc >> 4) << 6), q[s] |= uint8_t((mq >> 4) << 6);
        }
        const float step = ds * float(sc), off = ms * float(mq);  // as dequantization sees them
        for (int i = 0; i < 32; ++i)
            codes[32 * s + i] = uint8_t(step > 0.0f ? clamp_int(round_half_away((x[32 * s + i] + off) / step), 0, top) : 0);
    }
    return true;
}

}  // namespace detail

// ---- dequantization, 32 values at a time: part p (0..7) of a block is its values [32 p, 32 p + 32) ----
// (a GPU thread decodes one part: cuda/dequantize.cu; the whole-block functions below are the 8 parts)

// q2_K and q3_K: part p holds code bits 2k of bytes 32h .. 32h + 31 (h = p / 4, k = p % 4), sub-blocks 2p, 2p + 1.
KILN_HOST_DEVICE void dequantize_q2_K_part(const uint8_t* block, int p, float* out) {
    const float d = half_to_float(detail::load_u16(block + 80)), dmin = half_to_float(detail::load_u16(block + 82));
    const uint8_t* q = block + 16 + 32 * (p / 4);
    const int shift = 2 * (p % 4);
    for (int half = 0; half < 2; ++half) {  // sub-block 2p + half: its scale and minimum once
        const int s = block[2 * p + half];
        const float step = d * float(s & 0x0f), off = dmin * float(s >> 4);
        for (int l = 16 * half; l < 16 * half + 16; ++l) out[l] = step * float((q[l] >> shift) & 3) - off;
    }
}

KILN_HOST_DEVICE int q3_K_scale(const uint8_t* scales, int s) {
    const int low = s < 8 ? scales[s] & 0x0f : scales[s - 8] >> 4;
    return (low | (((scales[8 + s % 4] >> (2 * (s / 4))) & 3) << 4)) - 32;
}

KILN_HOST_DEVICE void dequantize_q3_K_part(const uint8_t* block, int p, float* out) {
    const float d = half_to_float(detail::load_u16(block + 108));
    const uint8_t *hmask = block, *q = block + 32 + 32 * (p / 4);
    const int shift = 2 * (p % 4);
    for (int half = 0; half < 2; ++half) {  // sub-block 2p + half: its scale once
        const float step = d * float(q3_K_scale(block + 96, 2 * p + half));
        for (int l = 16 * half; l < 16 * half + 16; ++l)
            out[l] = step * float(((q[l] >> shift) & 3) - ((hmask[l] >> p) & 1 ? 0 : 4));
    }
}

KILN_HOST_DEVICE void dequantize_q4_K_part(const uint8_t* block, int p, float* out) {
    const float d = half_to_float(detail::load_u16(block)), dmin = half_to_float(detail::load_u16(block + 2));
    int sc, m;
    detail::k_scale_min(block + 4, p, &sc, &m);
    const float step = d * float(sc), off = dmin * float(m);
    const uint8_t* q = block + 16 + 32 * (p / 2);  // group p/2's nibbles: low for even p, high for odd
    for (int l = 0; l < 32; ++l) out[l] = step * float(p % 2 ? q[l] >> 4 : q[l] & 0x0f) - off;
}

KILN_HOST_DEVICE void dequantize_q5_K_part(const uint8_t* block, int p, float* out) {
    const float d = half_to_float(detail::load_u16(block)), dmin = half_to_float(detail::load_u16(block + 2));
    int sc, m;
    detail::k_scale_min(block + 4, p, &sc, &m);
    const float step = d * float(sc), off = dmin * float(m);
    const uint8_t *qh = block + 16, *ql = block + 48 + 32 * (p / 2);
    for (int l = 0; l < 32; ++l)
        out[l] = step * float((p % 2 ? ql[l] >> 4 : ql[l] & 0x0f) | (((qh[l] >> p) & 1) << 4)) - off;
}

KILN_HOST_DEVICE void dequantize_q6_K_part(const uint8_t* block, int p, float* out) {
    const uint8_t *sc = block + 192;
    const float d = half_to_float(detail::load_u16(block + 208));
    const int h = p / 4, k = p % 4;  // half h, quarter k: values 128h + 32k + l
    const uint8_t *ql = block + 64 * h + 32 * (k & 1), *qh = block + 128 + 32 * h;
    for (int l = 0; l < 32; ++l) {
        const int q = ((k < 2 ? ql[l] : ql[l] >> 4) & 0x0f) | (((qh[l] >> (2 * k)) & 3) << 4);
        out[l] = d * float(int8_t(sc[(32 * p + l) / 16])) * float(q - 32);
    }
}

KILN_HOST_DEVICE void dequantize_q2_K(const uint8_t* block, float* out) {
    for (int p = 0; p < 8; ++p) dequantize_q2_K_part(block, p, out + 32 * p);
}
KILN_HOST_DEVICE void dequantize_q3_K(const uint8_t* block, float* out) {
    for (int p = 0; p < 8; ++p) dequantize_q3_K_part(block, p, out + 32 * p);
}
KILN_HOST_DEVICE void dequantize_q4_K(const uint8_t* block, float* out) {
    for (int p = 0; p < 8; ++p) dequantize_q4_K_part(block, p, out + 32 * p);
}
KILN_HOST_DEVICE void dequantize_q5_K(const uint8_t* block, float* out) {
    for (int p = 0; p < 8; ++p) dequantize_q5_K_part(block, p, out + 32 * p);
}
KILN_HOST_DEVICE void dequantize_q6_K(const uint8_t* block, float* out) {
    for (int p = 0; p < 8; ++p) dequantize_q6_K_part(block, p, out + 32 * p);
}

// ---- quantization of one block of 256 floats; false for a NaN or infinite value or an fp16 overflow ----

KILN_HOST_DEVICE bool quantize_q4_K(const float* x, uint8_t* block) {
    uint8_t c[256];
    if (!detail::quantize_k_affine(x, 15, block, c)) return false;
    for (int g = 0; g < 4; ++g)
        for (int l = 0; l < 32; ++l) block[16 + 32 * g + l] = uint8_t(c[64 * g + l] | (c[64 * g + 32 + l] << 4));
    return true;
}

KILN_HOST_DEVICE bool quantize_q5_K(const float* x, uint8_t* block) {
    uint8_t c[256];
    if (!detail::quantize_k_affine(x, 31, block, c)) return false;
    uint8_t *qh = block + 16, *ql = block + 48;
    for (int l = 0; l < 32; ++l) qh[l] = 0;
    for (int g = 0; g < 4; ++g)
        for (int l = 0; l < 32; ++l) {
            const uint8_t lo = c[64 * g + l], hi = c[64 * g + 32 + l];
            ql[32 * g + l] = uint8_t((lo & 0x0f) | ((hi & 0x0f) << 4));
            qh[l] |= uint8_t(((lo >> 4) << (2 * g)) | ((hi >> 4) << (2 * g + 1)));
        }
    return true;
}

KILN_HOST_DEVICE bool quantize_q6_K(const float* x, uint8_t* block) {
    if (!detail::all_finite(x, 256)) return false;
    float a[16], amax = 0.0f, unused;
    for (int s = 0; s < 16; ++s) {
        detail::fit_scale(x + 16 * s, 16, -32, 31, false, &a[s], &unused);
        if (detail::magnitude(a[s]) > amax) amax = detail::magnitude(a[s]);
    }
    const float d = amax / 127.0f;
    const uint16_t dh = float_to_half(d);
    if (detail::fp16_overflows(dh)) return false;
    const float ds = half_to_float(dh);
    uint8_t *ql = block, *qh = block + 128;
    for (int i = 0; i < 192; ++i) block[i] = 0;
    for (int s = 0; s < 16; ++s) {
        const int sc = d > 0.0f ? detail::clamp_int(detail::round_half_away(a[s] / d), -128, 127) : 0;
        block[192 + s] = uint8_t(int8_t(sc));
        const float step = ds * float(sc);
        for (int j = 0; j < 16; ++j) {
            const int i = 16 * s + j, h = i / 128, k = (i % 128) / 32, l = i % 32;
            const int q = (step != 0.0f ? detail::clamp_int(detail::round_half_away(x[i] / step), -32, 31) : 0) + 32;
            ql[64 * h + l + 32 * (k & 1)] |= uint8_t((q & 0x0f) << (k < 2 ? 0 : 4));
            qh[32 * h + l] |= uint8_t((q >> 4) << (2 * k));
        }
    }
    detail::store_u16(block + 208, dh);
    return true;
}

// q2_K: per 16 values a scale and an offset (codes 0..3), as q4_K's per 32; sub-scales and minimums rounded to 4
// bits against d = largest/15 and dmin = largest/15.
KILN_HOST_DEVICE bool quantize_q2_K(const float* x, uint8_t* block) {
    if (!detail::all_finite(x, 256)) return false;
    float a[16], m[16], max_a, max_m;
    detail::fit_affine_sub_blocks(x, 16, 3, a, m, &max_a, &max_m);
    const float d = max_a / 15.0f, dmin = max_m / 15.0f;
    const uint16_t dh = float_to_half(d), mh = float_to_half(dmin);
    if (detail::fp16_overflows(dh) || detail::fp16_overflows(mh)) return false;
    const float ds = half_to_float(dh), ms = half_to_float(mh);
    for (int i = 0; i < 80; ++i) block[i] = 0;
    for (int s = 0; s < 16; ++s) {
        const int sc = d > 0.0f ? detail::clamp_int(detail::round_half_away(a[s] / d), 0, 15) : 0;
        const int mq = dmin > 0.0f ? detail::clamp_int(detail::round_half_away(m[s] / dmin), 0, 15) : 0;
        block[s] = uint8_t(sc | (mq << 4));
        const float step = ds * float(sc), off = ms * float(mq);  // as dequantization sees them
        for (int j = 0; j < 16; ++j) {
            const int i = 16 * s + j;
            const int q = step > 0.0f ? detail::clamp_int(detail::round_half_away((x[i] + off) / step), 0, 3) : 0;
            block[16 + 32 * (i / 128) + i % 32] |= uint8_t(q << (2 * ((i % 128) / 32)));
        }
    }
    detail::store_u16(block + 80, dh);
    detail::store_u16(block + 82, mh);
    return true;
}

// q3_K: per 16 values a signed scale (codes -4..3, the largest magnitude onto -4), sub-scales rounded to 6 bits
// (-32..31) against d = the sub-scale of largest magnitude / -32.
KILN_HOST_DEVICE bool quantize_q3_K(const float* x, uint8_t* block) {
    if (!detail::all_finite(x, 256)) return false;
    float a[16], big = 0.0f, unused;
    for (int s = 0; s < 16; ++s) {
        detail::fit_scale(x + 16 * s, 16, -4, 3, false, &a[s], &unused);
        if (detail::magnitude(a[s]) > detail::magnitude(big)) big = a[s];
    }
    const float d = big / -32.0f;
    const uint16_t dh = float_to_half(d);
    if (detail::fp16_overflows(dh)) return false;
    const float ds = half_to_float(dh);
    for (int i = 0; i < 108; ++i) block[i] = 0;
    uint8_t *hmask = block, *qs = block + 32, *scales = block + 96;
    for (int s = 0; s < 16; ++s) {
        const int sc = d != 0.0f ? detail::clamp_int(detail::round_half_away(a[s] / d), -32, 31) : 0;
        const int u = sc + 32;  // stored: low 4 bits by nibbles, high 2 bits in bytes 8..11
        scales[s % 8] |= uint8_t((u & 0x0f) << (s < 8 ? 0 : 4));
        scales[8 + s % 4] |= uint8_t((u >> 4) << (2 * (s / 4)));
        const float step = ds * float(sc);
        for (int j = 0; j < 16; ++j) {
            const int i = 16 * s + j, h = i / 128, k = (i % 128) / 32, l = i % 32;
            const int q = (step != 0.0f ? detail::clamp_int(detail::round_half_away(x[i] / step), -4, 3) : 0) + 4;
            qs[32 * h + l] |= uint8_t((q & 3) << (2 * k));
            if (q >= 4) hmask[l] |= uint8_t(1 << (4 * h + k));
        }
    }
    detail::store_u16(block + 108, dh);
    return true;
}

}  // namespace kiln::quant
