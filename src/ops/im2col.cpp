#include "ops/no_trapping_math.h"  // first: as in activations.cpp, so silu compiles the same
#include "ops/im2col.h"

#include <algorithm>
#include <cstring>

#include "ops/parallel.h"
#include "ops/vec_math.h"

namespace kiln::ops::detail {

namespace {

// dst[k] = src[(first + k) / 2] for k < n: n values of a nearest-2x upsampled row from its column
// `first` (>= 0) on, each source value written twice; a run may start or end on a pixel's second copy.
void repeat2(const float* src, int64_t first, int64_t n, float* dst) {
    if (n <= 0) return;
    int64_t k = 0;
    if (first % 2) dst[k++] = src[first / 2];
    const float* s = src + (first + k) / 2;
    const int64_t pairs = (n - k) / 2;
    for (int64_t m = 0; m < pairs; ++m) dst[k + 2 * m] = dst[k + 2 * m + 1] = s[m];
    if ((n - k) % 2) dst[n - 1] = s[pairs];
}

// One row of col: tap (c, i, j) for output pixels [p0, p1), which may span several output rows.
void fill_row(const float* x, const ConvGeometry& g, int64_t c, int64_t i, int64_t j, int64_t p0, int64_t p1,
              float* dst, const ChannelAffine* affine) {
    const int64_t s = g.stride;
    const int64_t off = j - g.padding;  // ix = ox * s + off
    // Output columns whose tap lands inside the image: 0 <= ox * s + off < width.
    const int64_t ox_lo = off >= 0 ? 0 : (-off + s - 1) / s;
    const int64_t ox_hi = g.width - 1 - off < 0 ? 0 : (g.width - 1 - off) / s + 1;
    int64_t p = p0;
    while (p < p1) {
        const int64_t oy = p / g.out_w;
        const int64_t ox0 = p % g.out_w;
        const int64_t ox1 = std::min(g.out_w, ox0 + (p1 - p));
        const int64_t iy = oy * s - g.padding + i;
        if (iy < 0 || iy >= g.height) {
            std::fill(dst, dst + (ox1 - ox0), 0.0f);
        } else {
            // With upsample2x, row iy of the upsampled image is row iy / 2 of x, column ix is x's ix / 2.
            const float* src = g.upsample2x ? x + (c * (g.height / 2) + iy / 2) * (g.width / 2)
                                            : x + (c * g.height + iy) * g.width;
            const int64_t lo = std::clamp(ox_lo, ox0, ox1), hi = std::clamp(ox_hi, lo, ox1);
            std::fill(dst, dst + (lo - ox0), 0.0f);
            if (g.upsample2x && s == 1) {
                repeat2(src, lo + off, hi - lo, dst + (lo - ox0));
            } else if (g.upsample2x) {
                for (int64_t ox = lo; ox < hi; ++ox) dst[ox - ox0] = src[(ox * s + off) / 2];
            } else if (s == 1) {
                if (hi > lo) std::memcpy(dst + (lo - ox0), src + lo + off, sizeof(float) * (hi - lo));
            } else {
                for (int64_t ox = lo; ox < hi; ++ox) dst[ox - ox0] = src[ox * s + off];
            }
            if (affine) {  // group_norm's y = x * a + b, then silu_'s y * sigmoid(y)
                const float a = affine->scale[c], b = affine->shift[c];
                float* seg = dst + (lo - ox0);
#pragma omp simd
                for (int64_t k = 0; k < hi - lo; ++k) {
                    const float v = seg[k] * a + b;
                    seg[k] = v * vec::sigmoid(v);
                }
            }
            std::fill(dst + (hi - ox0), dst + (ox1 - ox0), 0.0f);
        }
        dst += ox1 - ox0;
        p += ox1 - ox0;
    }
}

}  // namespace

void im2col_tile(const float* x, const ConvGeometry& g, int64_t p0, int64_t p1, float* col,
                 const ChannelAffine* affine) {
    const int64_t rows = g.channels * g.kh * g.kw;
    const int64_t cols = p1 - p0;
    parallel_for(rows, cols, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            const int64_t c = r / (g.kh * g.kw), i = (r / g.kw) % g.kh, j = r % g.kw;
            fill_row(x, g, c, i, j, p0, p1, col + r * cols, affine);
        }
    });
}

}  // namespace kiln::ops::detail
