// The int8 product's paths (int8_dot.h). x86 kernels: compiled for their ISA by target attributes and called
// only where the CPU has it, so the binary runs on any x86-64 and the file builds elsewhere.
#include "ops/int8_dot.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/half.h"
#include "ops/parallel.h"

#if defined(__x86_64__) || defined(__i386__)
// GCC 12's AVX-512 headers start some intrinsics from an undefined register and warn about it when inlined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define KILN_INT8_X86 1
#define KILN_AVX512 __attribute__((target("avx512f,avx512bw,avx512vnni")))
#define KILN_AVX2 __attribute__((target("avx2,fma")))
#define KILN_AVX_VNNI __attribute__((target("avx2,fma,avxvnni")))
#else
#define KILN_INT8_X86 0
#endif

namespace kiln::ops::detail {

namespace {

constexpr int kSteps = kQ8Block / 4;  // 4 values (one int32 lane) a step
constexpr int kGroupBytes = kQ8Columns * kQ8Block, kStepBytes = kQ8Columns * 4;
constexpr float kTinyBlock = 1e-30f;  // a block under this is zeros: 1 / (max / 127) stays finite
constexpr int64_t kPanelBytes = int64_t(192) << 10;  // a panel's codes, reread for each tile of rows: in L2
constexpr int64_t kChunkBytes = int64_t(256) << 10;  // widened weight rows, reread for each panel: in L2 too

inline int code_at(int j, int i) { return (i / 4) * kStepBytes + 4 * j + i % 4; }  // column j's code i

// One group's block: 16 columns x 32 values, value (j, i) at base[j * cs + i * ks].

void quantize_block_scalar(const float* base, int64_t cs, int64_t ks, int ncols, uint8_t* codes, float* scales,
                           float* sums) {
    for (int j = 0; j < kQ8Columns; ++j) {
        float amax = 0.0f;
        bool finite = true;
        for (int i = 0; j < ncols && i < kQ8Block; ++i) {
            const float a = std::fabs(base[j * cs + i * ks]);
            finite = finite && a <= std::numeric_limits<float>::max();
            amax = std::max(amax, a);
        }
        const float d = amax >= kTinyBlock ? amax / 127.0f : 0.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        scales[j] = finite ? d : std::numeric_limits<float>::quiet_NaN();
        int32_t sum = 0;
        for (int i = 0; i < kQ8Block; ++i) {
            float q = 0.0f;
            if (finite && j < ncols) q = std::clamp(std::nearbyint(base[j * cs + i * ks] * id), -127.0f, 127.0f);
            codes[code_at(j, i)] = uint8_t(int(q) + 128);
            sum += int(q);
        }
        sums[j] = scales[j] * float(sum);
    }
}

#if KILN_INT8_X86
// base: 32 rows of 16 contiguous columns, ks apart. The same operations as the scalar code.
KILN_AVX512 void quantize_block_avx512(const float* base, int64_t ks, uint8_t* codes, float* scales, float* sums) {
    const __m512 big = _mm512_set1_ps(std::numeric_limits<float>::max());
    __m512 amax = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (int i = 0; i < kQ8Block; ++i) {
        const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(base + i * ks));
        bad |= _mm512_cmp_ps_mask(a, big, _CMP_NLE_UQ);  // inf or NaN
        amax = _mm512_max_ps(amax, a);
    }
    const __mmask16 live = _mm512_cmp_ps_mask(amax, _mm512_set1_ps(kTinyBlock), _CMP_GE_OQ);
    const __m512 d = _mm512_maskz_div_ps(live, amax, _mm512_set1_ps(127.0f));
    const __m512 id = _mm512_maskz_div_ps(live, _mm512_set1_ps(1.0f), d);
    const __m512 scale = _mm512_mask_mov_ps(d, bad, _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
    _mm512_storeu_ps(scales, scale);
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127), offset = _mm512_set1_epi32(128);
    __m512i sum = _mm512_setzero_si512();
    for (int t = 0; t < kSteps; ++t) {
        __m512i word = _mm512_setzero_si512();
        for (int r = 0; r < 4; ++r) {
            __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(base + (4 * t + r) * ks), id));
            q = _mm512_maskz_mov_epi32(~bad, _mm512_min_epi32(_mm512_max_epi32(q, lo), hi));
            sum = _mm512_add_epi32(sum, q);
            word = _mm512_or_si512(word, _mm512_slli_epi32(_mm512_add_epi32(q, offset), 8 * r));
        }
        _mm512_storeu_si512(codes + t * kStepBytes, word);
    }
    _mm512_storeu_ps(sums, _mm512_mul_ps(scale, _mm512_cvtepi32_ps(sum)));
}

// Linear's layout: column j's 32 values contiguous at base + j * cs (no staging transpose). The same operations as
// the scalar code, per column; the codes go to their interleaved places by gathers.
KILN_AVX512 void quantize_columns_avx512(const float* base, int64_t cs, int ncols, uint8_t* codes, float* scales,
                                         float* sums) {
    const __m512 big = _mm512_set1_ps(std::numeric_limits<float>::max());
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127), offset = _mm512_set1_epi32(128);
    alignas(64) uint32_t words[kQ8Columns][kSteps];  // column j's codes, 4 a word
    for (int j = 0; j < kQ8Columns; ++j) {
        if (j >= ncols) {  // as zeros
            scales[j] = sums[j] = 0.0f;
            std::fill(words[j], words[j] + kSteps, 0x80808080u);
            continue;
        }
        const __m512 x0 = _mm512_loadu_ps(base + j * cs), x1 = _mm512_loadu_ps(base + j * cs + 16);
        const __m512 a0 = _mm512_abs_ps(x0), a1 = _mm512_abs_ps(x1);
        const bool bad = (_mm512_cmp_ps_mask(a0, big, _CMP_NLE_UQ) | _mm512_cmp_ps_mask(a1, big, _CMP_NLE_UQ)) != 0;
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
        const float d = amax >= kTinyBlock ? amax / 127.0f : 0.0f;
        const __m512 id = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
        const float scale = bad ? std::numeric_limits<float>::quiet_NaN() : d;
        const __mmask16 keep = bad ? 0 : 0xffff;
        const __m512i q0 = _mm512_maskz_mov_epi32(keep, _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x0, id)), lo), hi));
        const __m512i q1 = _mm512_maskz_mov_epi32(keep, _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x1, id)), lo), hi));
        scales[j] = scale;
        sums[j] = scale * float(_mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1)));
        _mm_store_si128(reinterpret_cast<__m128i*>(words[j]), _mm512_cvtepi32_epi8(_mm512_add_epi32(q0, offset)));
        _mm_store_si128(reinterpret_cast<__m128i*>(words[j] + 4), _mm512_cvtepi32_epi8(_mm512_add_epi32(q1, offset)));
    }
    const __m512i column = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                              _mm512_set1_epi32(kSteps));
    for (int t = 0; t < kSteps; ++t)
        _mm512_storeu_si512(codes + t * kStepBytes,
                            _mm512_i32gather_epi32(_mm512_add_epi32(column, _mm512_set1_epi32(t)), words, 4));
}

KILN_AVX2 void quantize_block_avx2(const float* base, int64_t ks, uint8_t* codes, float* scales, float* sums) {
    const __m256 sign = _mm256_set1_ps(-0.0f), big = _mm256_set1_ps(std::numeric_limits<float>::max());
    for (int h = 0; h < 2; ++h) {  // columns 8h .. 8h + 7
        const float* b = base + 8 * h;
        __m256 amax = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
        for (int i = 0; i < kQ8Block; ++i) {
            const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(b + i * ks));
            bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, big, _CMP_NLE_UQ));
            amax = _mm256_max_ps(amax, a);
        }
        const __m256 live = _mm256_cmp_ps(amax, _mm256_set1_ps(kTinyBlock), _CMP_GE_OQ);
        const __m256 d = _mm256_and_ps(live, _mm256_div_ps(amax, _mm256_set1_ps(127.0f)));
        const __m256 id = _mm256_and_ps(live, _mm256_div_ps(_mm256_set1_ps(1.0f), d));
        const __m256 scale = _mm256_blendv_ps(d, _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()), bad);
        _mm256_storeu_ps(scales + 8 * h, scale);
        const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127), offset = _mm256_set1_epi32(128);
        const __m256i bad_bits = _mm256_castps_si256(bad);
        __m256i sum = _mm256_setzero_si256();
        for (int t = 0; t < kSteps; ++t) {
            __m256i word = _mm256_setzero_si256();
            for (int r = 0; r < 4; ++r) {
                __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(b + (4 * t + r) * ks), id));
                q = _mm256_andnot_si256(bad_bits, _mm256_min_epi32(_mm256_max_epi32(q, lo), hi));
                sum = _mm256_add_epi32(sum, q);
                word = _mm256_or_si256(word, _mm256_slli_epi32(_mm256_add_epi32(q, offset), 8 * r));
            }
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + t * kStepBytes + 32 * h), word);
        }
        _mm256_storeu_ps(sums + 8 * h, _mm256_mul_ps(scale, _mm256_cvtepi32_ps(sum)));
    }
}
#endif

// ---- products: a tile of weight rows x groups of columns, over all of K ----
struct GemmArgs {
    const Q8Activations& x;
    float* c;
    int64_t ldc;
    Q8Output layout;
    bool accumulate;
    bool mins;    // the weight's sub-blocks have mins: add mw * sx
    bool halves;  // q6_K: dot = h0 * dot(values 0..15) + h1 * dot(values 16..31), integers
};

inline void store_sums(const GemmArgs& a, int64_t o, int64_t g, const float* sums) {
    const int64_t col0 = g * kQ8Columns, n = std::min<int64_t>(kQ8Columns, a.x.columns() - col0);
    for (int64_t j = 0; j < n; ++j) {
        float& dst = a.layout == Q8Output::RowsByColumns ? a.c[o * a.ldc + col0 + j] : a.c[(col0 + j) * a.ldc + o];
        dst = a.accumulate ? dst + sums[j] : sums[j];
    }
}

void tile_scalar(const GemmArgs& a, const Int8Row& w, int64_t o, int64_t g) {
    float sums[kQ8Columns];
    for (int j = 0; j < kQ8Columns; ++j) {
        float f = 0.0f;
        for (int64_t b = 0; b < a.x.k_blocks(); ++b) {
            const uint8_t* xq = a.x.codes(g, b);
            const int8_t* wq = reinterpret_cast<const int8_t*>(w.codes + b * w.code_stride);
            int32_t half[2] = {0, 0};
            for (int i = 0; i < kQ8Block; ++i) half[i / 16] += (int32_t(xq[code_at(j, i)]) - 128) * int32_t(wq[i]);
            const int32_t dot = a.halves ? w.halves[2 * b] * half[0] + w.halves[2 * b + 1] * half[1] : half[0] + half[1];
            f = std::fma(float(dot), a.x.scales(g, b)[j] * w.scales[b], f);
            if (a.mins) f = std::fma(w.mins[b], a.x.sums(g, b)[j], f);
        }
        sums[j] = f;
    }
    store_sums(a, o, g, sums);
}

#if KILN_INT8_X86
inline int32_t load_word(const uint8_t* p) {
    int32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// vpdpbusd: unsigned x signed bytes. The activations' +128 adds the weight block's offset: acc starts at minus it.
// Steps [t0, t1) of block b into acc.
template <int R, int G>
KILN_AVX512 inline __attribute__((always_inline)) void steps_avx512(__m512i (&acc)[R][G], const uint8_t* const* xq,
                                                                    const uint8_t* const* wq, int t0, int t1) {
#pragma GCC unroll 8
    for (int t = t0; t < t1; ++t) {
        __m512i u[G];
        for (int p = 0; p < G; ++p) u[p] = _mm512_loadu_si512(xq[p] + t * kStepBytes);
        for (int r = 0; r < R; ++r) {
            const __m512i wb = _mm512_set1_epi32(load_word(wq[r] + 4 * t));
            for (int p = 0; p < G; ++p) acc[r][p] = _mm512_dpbusd_epi32(acc[r][p], u[p], wb);
        }
    }
}

// Halves (q6_K): each half of 16 values its own accumulator (its own offset), then the two times their integer
// factors, summed: the same integer as the other paths' (exact in int32: |dot| <= 2 x 128 x 16 x 127 x 32 < 2^24).
template <int R, int G, bool Halves>
KILN_AVX512 void tile_avx512(const GemmArgs& a, const Int8Row* w, int64_t o, int64_t g) {
    __m512 f[R][G];
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < G; ++p) f[r][p] = _mm512_setzero_ps();
    for (int64_t b = 0; b < a.x.k_blocks(); ++b) {
        __m512i acc[R][G];
        const uint8_t* wq[R];
        const uint8_t* xq[G];
        for (int p = 0; p < G; ++p) xq[p] = a.x.codes(g + p, b);
        for (int r = 0; r < R; ++r) {
            wq[r] = w[r].codes + b * w[r].code_stride;
            const __m512i start = _mm512_set1_epi32(-w[r].offsets[Halves ? 2 * b : b]);
            for (int p = 0; p < G; ++p) acc[r][p] = start;
        }
        if constexpr (Halves) {
            steps_avx512<R, G>(acc, xq, wq, 0, kSteps / 2);
            __m512i first[R][G];
            for (int r = 0; r < R; ++r) {
                const __m512i h0 = _mm512_set1_epi32(w[r].halves[2 * b]);
                const __m512i start = _mm512_set1_epi32(-w[r].offsets[2 * b + 1]);
                for (int p = 0; p < G; ++p) {
                    first[r][p] = _mm512_mullo_epi32(acc[r][p], h0);
                    acc[r][p] = start;
                }
            }
            steps_avx512<R, G>(acc, xq, wq, kSteps / 2, kSteps);
            for (int r = 0; r < R; ++r) {
                const __m512i h1 = _mm512_set1_epi32(w[r].halves[2 * b + 1]);
                for (int p = 0; p < G; ++p) acc[r][p] = _mm512_add_epi32(first[r][p], _mm512_mullo_epi32(acc[r][p], h1));
            }
        } else {
            steps_avx512<R, G>(acc, xq, wq, 0, kSteps);
        }
        for (int r = 0; r < R; ++r) {
            const __m512 dw = _mm512_set1_ps(w[r].scales[b]);
            for (int p = 0; p < G; ++p) {
                const __m512 s = _mm512_mul_ps(_mm512_loadu_ps(a.x.scales(g + p, b)), dw);
                f[r][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][p]), s, f[r][p]);
            }
            if (a.mins) {
                const __m512 mw = _mm512_set1_ps(w[r].mins[b]);
                for (int p = 0; p < G; ++p) f[r][p] = _mm512_fmadd_ps(mw, _mm512_loadu_ps(a.x.sums(g + p, b)), f[r][p]);
            }
        }
    }
    if constexpr (R == 4) {
        for (int p = 0; p < G; ++p) {  // linear's layout, 4 rows: each column's 4 outputs as one 16-byte store
            const int64_t col0 = (g + p) * kQ8Columns;
            if (a.layout != Q8Output::ColumnsByRows || col0 + kQ8Columns > a.x.columns()) continue;
            const __m512 t0 = _mm512_unpacklo_ps(f[0][p], f[1][p]), t1 = _mm512_unpackhi_ps(f[0][p], f[1][p]);
            const __m512 t2 = _mm512_unpacklo_ps(f[2][p], f[3][p]), t3 = _mm512_unpackhi_ps(f[2][p], f[3][p]);
            alignas(64) float cols[4][kQ8Columns];  // cols[k]: columns k, 4 + k, 8 + k, 12 + k, 4 rows each
            _mm512_store_ps(cols[0], _mm512_shuffle_ps(t0, t2, 0x44));
            _mm512_store_ps(cols[1], _mm512_shuffle_ps(t0, t2, 0xee));
            _mm512_store_ps(cols[2], _mm512_shuffle_ps(t1, t3, 0x44));
            _mm512_store_ps(cols[3], _mm512_shuffle_ps(t1, t3, 0xee));
            for (int j = 0; j < kQ8Columns; ++j) {
                float* dst = a.c + (col0 + j) * a.ldc + o;
                const __m128 v = _mm_load_ps(cols[j % 4] + 4 * (j / 4));
                _mm_storeu_ps(dst, a.accumulate ? _mm_add_ps(_mm_loadu_ps(dst), v) : v);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < G; ++p) {
            const int64_t col0 = (g + p) * kQ8Columns;
            if (R == 4 && a.layout == Q8Output::ColumnsByRows && col0 + kQ8Columns <= a.x.columns()) continue;  // above
            if (a.layout == Q8Output::RowsByColumns && col0 + kQ8Columns <= a.x.columns()) {
                float* dst = a.c + (o + r) * a.ldc + col0;
                _mm512_storeu_ps(dst, a.accumulate ? _mm512_add_ps(_mm512_loadu_ps(dst), f[r][p]) : f[r][p]);
                continue;
            }
            alignas(64) float sums[kQ8Columns];
            _mm512_store_ps(sums, f[r][p]);
            store_sums(a, o + r, g + p, sums);
        }
}

// AVX2: vpmaddubsw of |w| (unsigned) and x with w's sign (pairs summed in int16, |.| <= 2 x 128 x 127: no
// saturation), then vpmaddwd into int32. Steps [t0, t1) of block b into acc (columns 8h .. 8h + 7 in acc[r][h]).
constexpr int kAvx2Halves = 2;  // halves of the group: 8 columns each
template <int R>
KILN_AVX2 inline __attribute__((always_inline)) void steps_avx2(__m256i (&acc)[R][kAvx2Halves], const uint8_t* xq,
                                                                const Int8Row* w, int64_t b, int t0, int t1) {
    const __m256i flip = _mm256_set1_epi8(char(0x80)), ones = _mm256_set1_epi16(1);
    for (int t = t0; t < t1; ++t) {
        __m256i sx[kAvx2Halves];  // signed codes
        for (int h = 0; h < kAvx2Halves; ++h)
            sx[h] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + t * kStepBytes + 32 * h)),
                                     flip);
        for (int r = 0; r < R; ++r) {
            const __m256i wb = _mm256_set1_epi32(load_word(w[r].codes + b * w[r].code_stride + 4 * t));
            const __m256i wabs = _mm256_abs_epi8(wb);
            for (int h = 0; h < kAvx2Halves; ++h) {
                const __m256i pairs = _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(sx[h], wb));
                acc[r][h] = _mm256_add_epi32(acc[r][h], _mm256_madd_epi16(pairs, ones));
            }
        }
    }
}

// Halves (q6_K): as tile_avx512's.
template <int R, bool Halves>
KILN_AVX2 void tile_avx2(const GemmArgs& a, const Int8Row* w, int64_t o, int64_t g) {
    constexpr int H = kAvx2Halves;
    __m256 f[R][H];
    for (int r = 0; r < R; ++r)
        for (int h = 0; h < H; ++h) f[r][h] = _mm256_setzero_ps();
    for (int64_t b = 0; b < a.x.k_blocks(); ++b) {
        __m256i acc[R][H];
        for (int r = 0; r < R; ++r)
            for (int h = 0; h < H; ++h) acc[r][h] = _mm256_setzero_si256();
        const uint8_t* xq = a.x.codes(g, b);
        if constexpr (Halves) {
            steps_avx2<R>(acc, xq, w, b, 0, kSteps / 2);
            __m256i first[R][H];
            for (int r = 0; r < R; ++r) {
                const __m256i h0 = _mm256_set1_epi32(w[r].halves[2 * b]);
                for (int h = 0; h < H; ++h) {
                    first[r][h] = _mm256_mullo_epi32(acc[r][h], h0);
                    acc[r][h] = _mm256_setzero_si256();
                }
            }
            steps_avx2<R>(acc, xq, w, b, kSteps / 2, kSteps);
            for (int r = 0; r < R; ++r) {
                const __m256i h1 = _mm256_set1_epi32(w[r].halves[2 * b + 1]);
                for (int h = 0; h < H; ++h) acc[r][h] = _mm256_add_epi32(first[r][h], _mm256_mullo_epi32(acc[r][h], h1));
            }
        } else {
            steps_avx2<R>(acc, xq, w, b, 0, kSteps);
        }
        for (int r = 0; r < R; ++r) {
            const __m256 dw = _mm256_set1_ps(w[r].scales[b]);
            for (int h = 0; h < H; ++h) {
                const __m256 s = _mm256_mul_ps(_mm256_loadu_ps(a.x.scales(g, b) + 8 * h), dw);
                f[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r][h]), s, f[r][h]);
            }
            if (a.mins) {
                const __m256 mw = _mm256_set1_ps(w[r].mins[b]);
                for (int h = 0; h < H; ++h)
                    f[r][h] = _mm256_fmadd_ps(mw, _mm256_loadu_ps(a.x.sums(g, b) + 8 * h), f[r][h]);
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        alignas(32) float sums[kQ8Columns];
        for (int h = 0; h < H; ++h) _mm256_store_ps(sums + 8 * h, f[r][h]);
        store_sums(a, o + r, g, sums);
    }
}

using TileFn = void (*)(const GemmArgs&, const Int8Row*, int64_t, int64_t);
template <bool Halves>
constexpr TileFn kAvx512Tiles[4][3] = {
    {tile_avx512<1, 1, Halves>, tile_avx512<1, 2, Halves>, tile_avx512<1, 3, Halves>},
    {tile_avx512<2, 1, Halves>, tile_avx512<2, 2, Halves>, tile_avx512<2, 3, Halves>},
    {tile_avx512<3, 1, Halves>, tile_avx512<3, 2, Halves>, tile_avx512<3, 3, Halves>},
    {tile_avx512<4, 1, Halves>, tile_avx512<4, 2, Halves>, tile_avx512<4, 3, Halves>}};
template <bool Halves>
constexpr TileFn kAvx2Tiles[2] = {tile_avx2<1, Halves>, tile_avx2<2, Halves>};

// AVX-VNNI: tile_avx512's operations on 256-bit registers, a group's 16 columns as two halves of 8 (acc[r][h]).
template <int R>
KILN_AVX_VNNI inline __attribute__((always_inline)) void steps_avx_vnni(__m256i (&acc)[R][2], const uint8_t* xq,
                                                                        const uint8_t* const* wq, int t0, int t1) {
#pragma GCC unroll 8
    for (int t = t0; t < t1; ++t) {
        __m256i u[2];
        for (int h = 0; h < 2; ++h) u[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + t * kStepBytes + 32 * h));
        for (int r = 0; r < R; ++r) {
            const __m256i wb = _mm256_set1_epi32(load_word(wq[r] + 4 * t));
            for (int h = 0; h < 2; ++h) acc[r][h] = _mm256_dpbusd_avx_epi32(acc[r][h], u[h], wb);
        }
    }
}

template <int R, bool Halves>
KILN_AVX_VNNI void tile_avx_vnni(const GemmArgs& a, const Int8Row* w, int64_t o, int64_t g) {
    __m256 f[R][2];
    for (int r = 0; r < R; ++r)
        for (int h = 0; h < 2; ++h) f[r][h] = _mm256_setzero_ps();
    for (int64_t b = 0; b < a.x.k_blocks(); ++b) {
        __m256i acc[R][2];
        const uint8_t* wq[R];
        const uint8_t* xq = a.x.codes(g, b);
        for (int r = 0; r < R; ++r) {
            wq[r] = w[r].codes + b * w[r].code_stride;
            acc[r][0] = acc[r][1] = _mm256_set1_epi32(-w[r].offsets[Halves ? 2 * b : b]);
        }
        if constexpr (Halves) {
            steps_avx_vnni<R>(acc, xq, wq, 0, kSteps / 2);
            __m256i first[R][2];
            for (int r = 0; r < R; ++r) {
                const __m256i h0 = _mm256_set1_epi32(w[r].halves[2 * b]);
                for (int h = 0; h < 2; ++h) first[r][h] = _mm256_mullo_epi32(acc[r][h], h0);
                acc[r][0] = acc[r][1] = _mm256_set1_epi32(-w[r].offsets[2 * b + 1]);
            }
            steps_avx_vnni<R>(acc, xq, wq, kSteps / 2, kSteps);
            for (int r = 0; r < R; ++r) {
                const __m256i h1 = _mm256_set1_epi32(w[r].halves[2 * b + 1]);
                for (int h = 0; h < 2; ++h) acc[r][h] = _mm256_add_epi32(first[r][h], _mm256_mullo_epi32(acc[r][h], h1));
            }
        } else {
            steps_avx_vnni<R>(acc, xq, wq, 0, kSteps);
        }
        for (int r = 0; r < R; ++r) {
            const __m256 dw = _mm256_set1_ps(w[r].scales[b]);
            for (int h = 0; h < 2; ++h) {
                const __m256 s = _mm256_mul_ps(_mm256_loadu_ps(a.x.scales(g, b) + 8 * h), dw);
                f[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r][h]), s, f[r][h]);
            }
            if (a.mins) {
                const __m256 mw = _mm256_set1_ps(w[r].mins[b]);
                for (int h = 0; h < 2; ++h)
                    f[r][h] = _mm256_fmadd_ps(mw, _mm256_loadu_ps(a.x.sums(g, b) + 8 * h), f[r][h]);
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        alignas(32) float sums[kQ8Columns];
        for (int h = 0; h < 2; ++h) _mm256_store_ps(sums + 8 * h, f[r][h]);
        store_sums(a, o + r, g, sums);
    }
}

template <bool Halves>
constexpr TileFn kAvxVnniTiles[3] = {tile_avx_vnni<1, Halves>, tile_avx_vnni<2, Halves>, tile_avx_vnni<3, Halves>};
#endif

// Register blocks, weight rows x groups: AVX-512 12 int32 + 12 float accumulators of 32 registers (halves: 4 x 2,
// 8 int32 + 8 first halves + 8 float; 4 x 3 spills: slower in a noisy try); AVX-VNNI 6 + 6 of 16 (halves:
// 4 + 4 + 4); AVX2 4 + 4 of 16.
struct Blocking {
    int rows, groups;
};
Blocking blocking(Int8Isa isa, bool halves) {
    if (isa == Int8Isa::Avx512Vnni) return halves ? Blocking{4, 2} : Blocking{4, 3};
    if (isa == Int8Isa::AvxVnni) return halves ? Blocking{2, 1} : Blocking{3, 1};
    return isa == Int8Isa::Avx2 ? Blocking{2, 1} : Blocking{1, 1};
}

// w: the tile's rows o .. o + rows - 1.
void run_tile(Int8Isa isa, const GemmArgs& a, const Int8Row* w, int64_t o, int rows, int64_t g, int groups) {
#if KILN_INT8_X86
    if (isa == Int8Isa::Avx512Vnni)
        return (a.halves ? kAvx512Tiles<true> : kAvx512Tiles<false>)[rows - 1][groups - 1](a, w, o, g);
    if (isa == Int8Isa::AvxVnni) {
        for (int64_t gg = g; gg < g + groups; ++gg)
            (a.halves ? kAvxVnniTiles<true> : kAvxVnniTiles<false>)[rows - 1](a, w, o, gg);
        return;
    }
    if (isa == Int8Isa::Avx2) {
        for (int64_t gg = g; gg < g + groups; ++gg) (a.halves ? kAvx2Tiles<true> : kAvx2Tiles<false>)[rows - 1](a, w, o, gg);
        return;
    }
#endif
    (void)isa;
    for (int r = 0; r < rows; ++r)
        for (int64_t gg = g; gg < g + groups; ++gg) tile_scalar(a, w[r], o + r, gg);
}

std::atomic<int> forced_isa{-1};

}  // namespace

const char* int8_isa_name(Int8Isa isa) {
    static const char* const names[] = {"scalar", "avx2", "avx-vnni", "avx512-vnni"};
    return names[int(isa)];
}

bool int8_isa_available(Int8Isa isa) {
#if KILN_INT8_X86
    if (isa == Int8Isa::Avx512Vnni)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    if (isa == Int8Isa::AvxVnni)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("avxvnni");
    if (isa == Int8Isa::Avx2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    return isa == Int8Isa::Scalar;
}

Int8Isa int8_isa() {
    const int forced = forced_isa.load(std::memory_order_relaxed);
    if (forced >= 0) return Int8Isa(forced);
    static const Int8Isa best = int8_isa_available(Int8Isa::Avx512Vnni) ? Int8Isa::Avx512Vnni
                                : int8_isa_available(Int8Isa::AvxVnni)  ? Int8Isa::AvxVnni
                                : int8_isa_available(Int8Isa::Avx2)     ? Int8Isa::Avx2
                                                                        : Int8Isa::Scalar;
    return best;
}

void force_int8_isa(Int8Isa isa) {
    require(int8_isa_available(isa), ErrorKind::InvalidArgument,
            std::string("int8 products: this CPU cannot run the ") + int8_isa_name(isa) + " kernels");
    forced_isa.store(int(isa), std::memory_order_relaxed);
}

Q8Activations::Q8Activations(int64_t k, int64_t columns, const char* op)
    : k_blocks_(k / kQ8Block), columns_(columns), groups_((columns + kQ8Columns - 1) / kQ8Columns) {
    check(k % kQ8Block == 0, op, "int8 products need K a multiple of 32, not " + std::to_string(k));
    const int64_t scale_floats = groups_ * k_blocks_ * kQ8Columns;  // then the sums, then 32 bytes of codes a scale
    storage_ = scratch_floats(std::max<int64_t>(scale_floats * 10, 1), op);
    scales_ = storage_.get();
    sums_ = storage_.get() + scale_floats;
    codes_ = reinterpret_cast<uint8_t*>(storage_.get() + 2 * scale_floats);
}

void Q8Activations::quantize(const float* src, int64_t column_stride, int64_t k_stride) {
    const Int8Isa isa = int8_isa();
    parallel_for(groups_ * k_blocks_, kGroupBytes, [&](int64_t begin, int64_t end) {
        alignas(64) float staged[kQ8Block * kQ8Columns];
        for (int64_t item = begin; item < end; ++item) {
            const int64_t g = item / k_blocks_, b = item % k_blocks_;
            const int ncols = int(std::min<int64_t>(kQ8Columns, columns_ - g * kQ8Columns));
            const float* base = src + g * kQ8Columns * column_stride + b * kQ8Block * k_stride;
            uint8_t* codes = codes_ + item * kGroupBytes;
            float *scales = scales_ + item * kQ8Columns, *sums = sums_ + item * kQ8Columns;
            if (isa == Int8Isa::Scalar) {
                quantize_block_scalar(base, column_stride, k_stride, ncols, codes, scales, sums);
                continue;
            }
#if KILN_INT8_X86
            if (isa == Int8Isa::Avx512Vnni && k_stride == 1 && column_stride >= kQ8Block) {
                quantize_columns_avx512(base, column_stride, ncols, codes, scales, sums);
                continue;
            }
            int64_t ks = k_stride;
            if (column_stride != 1 || ncols < kQ8Columns) {  // stage as 32 rows of 16 columns, zeros past the last
                for (int i = 0; i < kQ8Block; ++i)
                    for (int j = 0; j < kQ8Columns; ++j)
                        staged[i * kQ8Columns + j] = j < ncols ? base[j * column_stride + i * k_stride] : 0.0f;
                base = staged;
                ks = kQ8Columns;
            }
            if (isa == Int8Isa::Avx512Vnni) quantize_block_avx512(base, ks, codes, scales, sums);
            else quantize_block_avx2(base, ks, codes, scales, sums);
#endif
        }
    });
}

void int8_gemm(const Int8Weights& w, const Q8Activations& x, float* c, int64_t ldc, Q8Output layout,
               bool accumulate) {
    check(w.k_blocks() == x.k_blocks(), "int8_gemm", "weights and activations of different K");
    const Int8Isa isa = int8_isa();
    const Blocking blk = blocking(isa, w.has_halves());
    const GemmArgs args{x, c, ldc, layout, accumulate, w.has_mins(), w.has_halves()};
    const int threads = omp_get_max_threads();
    // Items. q8_0: a tile of rows x a panel of columns (the panel's codes stay in cache while the rows go by).
    // Widened formats: a chunk of row tiles x all the panels, the chunk widened once into its thread's scratch
    // (in L2 beside a panel: at most kChunkBytes, and about 4 chunks a thread for balance).
    const int64_t group_bytes = std::max<int64_t>(x.k_blocks() * kGroupBytes, 1);
    const int64_t panel = std::max<int64_t>(1, kPanelBytes / group_bytes / blk.groups) * blk.groups;
    const int64_t panels = (x.groups() + panel - 1) / panel, row_tiles = (w.rows() + blk.rows - 1) / blk.rows;
    const bool widen = w.scratch_bytes(1) > 0;
    const int64_t chunk_tiles =
        widen ? std::clamp<int64_t>(kChunkBytes / w.scratch_bytes(blk.rows), 1,
                                    std::max<int64_t>(1, row_tiles / (4 * int64_t(threads))))
              : 1;
    const int64_t chunk_rows = chunk_tiles * blk.rows, chunks = (row_tiles + chunk_tiles - 1) / chunk_tiles;
    const int64_t panels_per_item = widen ? panels : 1, panel_items = (panels + panels_per_item - 1) / panels_per_item;
    const int64_t scratch_bytes = (w.scratch_bytes(int(chunk_rows)) + 63) / 64 * 64;
    const Scratch widened = widen ? scratch_floats(threads * scratch_bytes / 4, "int8_gemm") : Scratch{};
    std::vector<Int8Row> views(size_t(threads * chunk_rows));
    parallel_for(panel_items * chunks, chunk_rows * panels_per_item * panel * group_bytes,
                 [&](int64_t begin, int64_t end) {
        const int t = omp_get_thread_num();
        uint8_t* scratch = widen ? reinterpret_cast<uint8_t*>(widened.get()) + t * scratch_bytes : nullptr;
        Int8Row* rows_of = views.data() + t * chunk_rows;
        for (int64_t item = begin; item < end; ++item) {
            const int64_t p0 = (item / chunks) * panels_per_item, r0 = (item % chunks) * chunk_rows;
            const int64_t nrows = std::min(chunk_rows, w.rows() - r0);
            w.rows_view(r0, int(nrows), scratch, rows_of);
            for (int64_t p = p0; p < std::min(panels, p0 + panels_per_item); ++p) {
                const int64_t g0 = p * panel, g1 = std::min(x.groups(), g0 + panel);
                for (int64_t o = r0; o < r0 + nrows; o += blk.rows) {
                    const int rows = int(std::min<int64_t>(blk.rows, r0 + nrows - o));
                    for (int64_t g = g0; g < g1; g += blk.groups)
                        run_tile(isa, args, rows_of + (o - r0), o, rows, g, int(std::min<int64_t>(blk.groups, g1 - g)));
                }
            }
        }
    });
}

}  // namespace kiln::ops::detail
