#include "ops/int8_dot_weights.h"

#include <string>

#include "core/half.h"
#include "ops/int8_dot.h"
#include "ops/parallel.h"
#include "quant/k_quants.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KILN_WIDEN_X86 1
#define KILN_AVX512_BW __attribute__((target("avx512f,avx512bw,avx512vl")))
#else
#define KILN_WIDEN_X86 0
#endif

namespace kiln::ops::detail {

namespace {

using quant::detail::load_u16;
using quant::detail::load_u32;

constexpr int kSub = 32;  // values a sub-block

float half_at(const uint8_t* p) { return half_to_float(load_u16(p)); }

// 32 codes from 16 bytes of nibbles (value j low, j + 16 high), minus bias; returns their sum.
int widen_nibbles(const uint8_t* q, int bias, uint8_t* c) {
    int sum = 0;
    for (int j = 0; j < 16; ++j) {
        const int lo = q[j] & 15, hi = q[j] >> 4;
        c[j] = uint8_t(lo - bias);
        c[j + 16] = uint8_t(hi - bias);
        sum += lo + hi;
    }
    return sum - kSub * bias;
}

// The same with the fifth bits: bit i of the little-endian uint32 at qh is value i's.
int widen_fives(const uint8_t* qh, const uint8_t* q, int bias, uint8_t* c) {
    const uint32_t h = load_u32(qh);
    int sum = 0;
    for (int j = 0; j < 16; ++j) {
        const int lo = (q[j] & 15) | int(((h >> j) & 1u) << 4), hi = (q[j] >> 4) | int(((h >> (j + 16)) & 1u) << 4);
        c[j] = uint8_t(lo - bias);
        c[j + 16] = uint8_t(hi - bias);
        sum += lo + hi;
    }
    return sum - kSub * bias;
}

#if KILN_WIDEN_X86
// The same integers as widen_nibbles / widen_fives (fifth: the fifth bits, 0 for 4-bit codes), 32 lanes at once.
KILN_AVX512_BW int widen_avx512(const uint8_t* q, uint32_t fifth, int bias, uint8_t* c) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)), low4 = _mm_set1_epi8(15);
    const __m128i lo = _mm_and_si128(raw, low4), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), low4);
    __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
    v = _mm256_mask_add_epi8(v, fifth, v, _mm256_set1_epi8(16));
    const __m256i sad = _mm256_sad_epu8(v, _mm256_setzero_si256());  // 4 sums of 8 codes
    const __m128i s = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c), _mm256_sub_epi8(v, _mm256_set1_epi8(char(bias))));
    return _mm_cvtsi128_si32(s) + _mm_extract_epi32(s, 2) - kSub * bias;
}

// A k-quant sub-block's codes: (q[l] >> shift) & 15, plus 16 where bit p of qh[l] is set (qh: nullptr for q4_K).
KILN_AVX512_BW int widen_k_avx512(const uint8_t* q, int shift, const uint8_t* qh, int p, uint8_t* c) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
    __m256i v = _mm256_and_si256(_mm256_srli_epi16(raw, shift), _mm256_set1_epi8(15));
    if (qh) {
        const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
        v = _mm256_mask_add_epi8(v, _mm256_test_epi8_mask(bits, _mm256_set1_epi8(char(1 << p))), v,
                                 _mm256_set1_epi8(16));
    }
    const __m256i sad = _mm256_sad_epu8(v, _mm256_setzero_si256());
    const __m128i s = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c), v);
    return _mm_cvtsi128_si32(s) + _mm_extract_epi32(s, 2);
}

// q6_K's 32 codes (widen_q6_part below), the same integers; sums: each half's code sum.
KILN_AVX512_BW void widen_q6_avx512(const uint8_t* ql, int shift, const uint8_t* qh, int k, uint8_t* c, int* sums) {
    const __m256i low = _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql)), shift),
                                         _mm256_set1_epi8(15));
    const __m256i high = _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh)), 2 * k),
                                          _mm256_set1_epi8(3));
    const __m256i q = _mm256_or_si256(low, _mm256_slli_epi16(high, 4));  // 0..63: no carry across bytes
    const __m256i sad = _mm256_sad_epu8(q, _mm256_setzero_si256());     // 4 sums of 8 codes
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c), _mm256_sub_epi8(q, _mm256_set1_epi8(32)));
    sums[0] = int(_mm256_extract_epi64(sad, 0) + _mm256_extract_epi64(sad, 1)) - 16 * 32;
    sums[1] = int(_mm256_extract_epi64(sad, 2) + _mm256_extract_epi64(sad, 3)) - 16 * 32;
}
#endif

// q4_K / q5_K sub-block p of a 256-value block (quant/k_quants.h's layout): its codes.
int widen_k_part(const uint8_t* blk, bool five, int p, bool simd, uint8_t* c) {
    const int shift = 4 * (p % 2);
    const uint8_t* q = blk + (five ? 48 : 16) + 32 * (p / 2);
#if KILN_WIDEN_X86
    if (simd) return widen_k_avx512(q, shift, five ? blk + 16 : nullptr, p, c);
#endif
    (void)simd;
    int sum = 0;
    for (int l = 0; l < kSub; ++l) {
        const int v = ((q[l] >> shift) & 15) | (five ? ((blk[16 + l] >> p) & 1) << 4 : 0);
        c[l] = uint8_t(v);
        sum += v;
    }
    return sum;
}

// q6_K sub-block p of a 256-value block (quant/k_quants.h's layout): its 32 codes q - 32 and each half's code
// sum.
void widen_q6_part(const uint8_t* blk, int p, bool simd, uint8_t* c, int* sums) {
    const int h = p / 4, k = p % 4, shift = k < 2 ? 0 : 4;
    const uint8_t *ql = blk + 64 * h + 32 * (k & 1), *qh = blk + 128 + 32 * h;
#if KILN_WIDEN_X86
    if (simd) return widen_q6_avx512(ql, shift, qh, k, c, sums);
#endif
    (void)simd;
    for (int half = 0; half < 2; ++half) {  // a loop per half: the compiler vectorises it
        int sum = 0;
        for (int l = 16 * half; l < 16 * half + 16; ++l) {
            const int v = (((ql[l] >> shift) & 15) | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
            c[l] = uint8_t(v);
            sum += v;
        }
        sums[half] = sum;
    }
}

// q3_K sub-block p of a 256-value block (quant/k_quants.h's layout): its 32 codes (-4..3) and each half's code sum.
void widen_q3_part(const uint8_t* blk, int p, uint8_t* c, int* sums) {
    const uint8_t *q = blk + 32 + 32 * (p / 4), *hmask = blk;
    const int shift = 2 * (p % 4);
    for (int half = 0; half < 2; ++half) {  // a loop per half: the compiler vectorises it
        int sum = 0;
        for (int l = 16 * half; l < 16 * half + 16; ++l) {
            const int v = ((q[l] >> shift) & 3) - ((hmask[l] >> p) & 1 ? 0 : 4);
            c[l] = uint8_t(v);
            sum += v;
        }
        sums[half] = sum;
    }
}

// One row of k_blocks sub-blocks: codes (32 a sub-block), scales, offsets (128 x the codes' sum; with halves,
// two a sub-block), mins, halves (q6_K, q3_K). simd: by AVX-512 (the same integers).
void widen_row(DType dtype, const uint8_t* src, int64_t k_blocks, bool simd, uint8_t* codes, float* scales,
               int32_t* offsets, float* mins, int32_t* halves) {
#if KILN_WIDEN_X86
    const auto nibbles = [simd](const uint8_t* q, int bias, uint8_t* c) {
        return simd ? widen_avx512(q, 0, bias, c) : widen_nibbles(q, bias, c);
    };
    const auto fives = [simd](const uint8_t* qh, const uint8_t* q, int bias, uint8_t* c) {
        return simd ? widen_avx512(q, load_u32(qh), bias, c) : widen_fives(qh, q, bias, c);
    };
#else
    (void)simd;
    const auto nibbles = widen_nibbles;
    const auto fives = widen_fives;
#endif
    float d = 0.0f, dmin = 0.0f;  // k-quants: the block's
    for (int64_t b = 0; b < k_blocks; ++b) {
        uint8_t* c = codes + b * kSub;
        int sum = 0;
        switch (dtype) {
        case DType::Q4_0: {
            const uint8_t* blk = src + b * quant::kQ4_0Bytes;
            scales[b] = half_at(blk);
            sum = nibbles(blk + 2, 8, c);
            break;
        }
        case DType::Q4_1: {
            const uint8_t* blk = src + b * quant::kQ4_1Bytes;
            scales[b] = half_at(blk);
            mins[b] = half_at(blk + 2);
            sum = nibbles(blk + 4, 0, c);
            break;
        }
        case DType::Q5_0: {
            const uint8_t* blk = src + b * quant::kQ5_0Bytes;
            scales[b] = half_at(blk);
            sum = fives(blk + 2, blk + 6, 16, c);
            break;
        }
        case DType::Q5_1: {
            const uint8_t* blk = src + b * quant::kQ5_1Bytes;
            scales[b] = half_at(blk);
            mins[b] = half_at(blk + 2);
            sum = fives(blk + 4, blk + 8, 0, c);
            break;
        }
        case DType::Q4_K:
        case DType::Q5_K: {
            const bool five = dtype == DType::Q5_K;
            const uint8_t* blk = src + (b / 8) * (five ? quant::kQ5_KBytes : quant::kQ4_KBytes);
            const int p = int(b % 8);
            if (p == 0) {  // the block's scale and min factors, once
                d = half_at(blk);
                dmin = half_at(blk + 2);
            }
            int sc, m;
            quant::detail::k_scale_min(blk + 4, p, &sc, &m);
            scales[b] = d * float(sc);
            mins[b] = -(dmin * float(m));
            sum = widen_k_part(blk, five, p, simd, c);
            break;
        }
        case DType::Q6_K: {
            const uint8_t* blk = src + (b / 8) * quant::kQ6_KBytes;
            const int p = int(b % 8);
            scales[b] = half_at(blk + 208);
            halves[2 * b] = int8_t(blk[192 + 2 * p]);
            halves[2 * b + 1] = int8_t(blk[192 + 2 * p + 1]);
            int sums[2];
            widen_q6_part(blk, p, simd, c, sums);
            offsets[2 * b] = 128 * sums[0];
            offsets[2 * b + 1] = 128 * sums[1];
            continue;
        }
        case DType::Q3_K: {  // as q6_K: the block's d, each half's integer factor sc - 32
            const uint8_t* blk = src + (b / 8) * quant::kQ3_KBytes;
            const int p = int(b % 8);
            scales[b] = half_at(blk + 108);
            halves[2 * b] = quant::q3_K_scale(blk + 96, 2 * p);
            halves[2 * b + 1] = quant::q3_K_scale(blk + 96, 2 * p + 1);
            int sums[2];
            widen_q3_part(blk, p, c, sums);
            offsets[2 * b] = 128 * sums[0];
            offsets[2 * b + 1] = 128 * sums[1];
            continue;
        }
        default:
            break;  // not taken (int8_products_take)
        }
        offsets[b] = 128 * sum;
    }
}

}  // namespace

// q2_K has a minimum per 16 values, which these products (one a 32-value sub-block) do not carry: linear and conv2d
// take it a tile of dequantized rows at a time (weight_rows.h). q3_K's per-16 scales are q6_K's halves.
bool int8_products_take(DType dtype) { return is_block_quantized(dtype) && dtype != DType::Q2_K; }

Int8Weights::Int8Weights(const Tensor& w, const char* op)
    : dtype_(w.dtype()),
      rows_(w.rank() ? w.dim(0) : 0),
      k_blocks_(rows_ ? w.numel() / rows_ / kSub : 0),
      row_bytes_(rows_ ? dtype_storage_bytes(w.dtype(), w.numel() / rows_) : 0) {
    const int64_t per_row = rows_ ? w.numel() / rows_ : 0;
    check(int8_products_take(dtype_) && rows_ > 0 && per_row * rows_ == w.numel() &&
              per_row % dtype_block_values(dtype_) == 0,
          op, desc("w", w) + " of " + dtype_name(dtype_) + " is not a weight of whole-block rows the int8 products take");
    blocks_ = w.blocks();
    if (dtype_ != DType::Q8_0) return;
    q8_ = scratch_floats(std::max<int64_t>(2 * rows_ * k_blocks_, 1), op);
    float* scales = q8_.get();
    int32_t* offsets = reinterpret_cast<int32_t*>(q8_.get() + rows_ * k_blocks_);
    parallel_for(rows_, k_blocks_ * quant::kQ8_0Bytes, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin * k_blocks_; i < end * k_blocks_; ++i) {
            const uint8_t* blk = blocks_ + i * quant::kQ8_0Bytes;
            scales[i] = half_at(blk);
            int32_t sum = 0;
            for (int j = 0; j < kSub; ++j) sum += int8_t(blk[2 + j]);
            offsets[i] = 128 * sum;
        }
    });
}

bool Int8Weights::has_mins() const {
    return dtype_ == DType::Q4_1 || dtype_ == DType::Q5_1 || dtype_ == DType::Q4_K || dtype_ == DType::Q5_K;
}

int64_t Int8Weights::scratch_bytes(int count) const {
    // Codes, scales, offsets and mins; halves: a second offset and two factors.
    return dtype_ == DType::Q8_0 ? 0 : int64_t(count) * k_blocks_ * (kSub + 3 * 4 + (has_halves() ? 3 * 4 : 0));
}

void Int8Weights::rows_view(int64_t first, int count, uint8_t* scratch, Int8Row* out) const {
    if (dtype_ == DType::Q8_0) {
        const float* scales = q8_.get();
        const int32_t* offsets = reinterpret_cast<const int32_t*>(scales + rows_ * k_blocks_);
        for (int r = 0; r < count; ++r) {
            const int64_t row = first + r;
            out[r] = {blocks_ + row * row_bytes_ + 2, quant::kQ8_0Bytes, scales + row * k_blocks_,
                      offsets + row * k_blocks_, nullptr, nullptr};
        }
        return;
    }
    // Codes, then scales, offsets, mins: n of each (halves: 2n offsets, then 2n factors).
    const int64_t n = int64_t(count) * k_blocks_, per = has_halves() ? 2 : 1;
    float* scales = reinterpret_cast<float*>(scratch + n * kSub);
    int32_t* offsets = reinterpret_cast<int32_t*>(scales + n);
    float* mins = reinterpret_cast<float*>(offsets + per * n);
    int32_t* halves = reinterpret_cast<int32_t*>(mins + n);
    const bool simd = int8_isa() == Int8Isa::Avx512Vnni;
    for (int r = 0; r < count; ++r) {
        const int64_t at = r * k_blocks_;
        widen_row(dtype_, blocks_ + (first + r) * row_bytes_, k_blocks_, simd, scratch + at * kSub, scales + at,
                  offsets + per * at, mins + at, halves + 2 * at);
        out[r] = {scratch + at * kSub, kSub, scales + at, offsets + per * at, has_mins() ? mins + at : nullptr,
                  has_halves() ? halves + 2 * at : nullptr};
    }
}

}  // namespace kiln::ops::detail
