// Reference data movement: every output element read from its source index.
#include "ops/ref/ref_check.h"
#include "ops/ref/ref_ops.h"

namespace kiln::ops::ref {

Tensor upsample_nearest2x(const Tensor& x) {
    expect(x.rank() == 4, "upsample_nearest2x", "rank");
    const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
    Tensor y({n, c, 2 * h, 2 * w});
    for (int64_t p = 0; p < n * c; ++p)
        for (int64_t oy = 0; oy < 2 * h; ++oy)
            for (int64_t ox = 0; ox < 2 * w; ++ox)
                y[(p * 2 * h + oy) * 2 * w + ox] = x[(p * h + oy / 2) * w + ox / 2];
    return y;
}

Tensor concat_channels(const Tensor& a, const Tensor& b) {
    expect(a.rank() >= 2 && a.rank() == b.rank() && a.dim(0) == b.dim(0), "concat_channels", "shapes");
    int64_t inner = 1;
    for (int d = 2; d < a.rank(); ++d) {
        expect(a.dim(d) == b.dim(d), "concat_channels", "trailing dims");
        inner *= a.dim(d);
    }
    const int64_t ca = a.dim(1), cb = b.dim(1);
    Shape shape = a.shape();
    shape[1] = ca + cb;
    Tensor y(shape);
    for (int64_t n = 0; n < a.dim(0); ++n)
        for (int64_t c = 0; c < ca + cb; ++c)
            for (int64_t i = 0; i < inner; ++i)
                y[(n * (ca + cb) + c) * inner + i] = c < ca ? a[(n * ca + c) * inner + i] : b[(n * cb + c - ca) * inner + i];
    return y;
}

Tensor nchw_to_nlc(const Tensor& x) {
    expect(x.rank() == 4, "nchw_to_nlc", "rank");
    const int64_t n = x.dim(0), c = x.dim(1), l = x.dim(2) * x.dim(3);
    Tensor y({n, l, c});
    for (int64_t b = 0; b < n; ++b)
        for (int64_t i = 0; i < l; ++i)
            for (int64_t ch = 0; ch < c; ++ch) y[(b * l + i) * c + ch] = x[(b * c + ch) * l + i];
    return y;
}

Tensor nlc_to_nchw(const Tensor& x, int64_t h, int64_t w) {
    expect(x.rank() == 3 && x.dim(1) == h * w, "nlc_to_nchw", "shape");
    const int64_t n = x.dim(0), l = h * w, c = x.dim(2);
    Tensor y({n, c, h, w});
    for (int64_t b = 0; b < n; ++b)
        for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t i = 0; i < l; ++i) y[(b * c + ch) * l + i] = x[(b * l + i) * c + ch];
    return y;
}

}  // namespace kiln::ops::ref
