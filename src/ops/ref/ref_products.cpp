// Reference linear and conv2d: the defining sums, one output element at a time, in double.
#include "ops/ref/ref_check.h"
#include "ops/ref/ref_ops.h"

namespace kiln::ops::ref {

Tensor linear(const Tensor& x, const Tensor& w, const Tensor* b) {
    expect(x.rank() >= 1 && w.rank() == 2 && w.dim(1) == x.dim(-1), "linear", "shapes");
    expect(!b || (b->rank() == 1 && b->dim(0) == w.dim(0)), "linear", "bias shape");
    const int64_t in = w.dim(1), out = w.dim(0);
    int64_t rows = 1;
    for (int d = 0; d + 1 < x.rank(); ++d) rows *= x.dim(d);
    Shape shape = x.shape();
    shape.back() = out;
    Tensor y(shape);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t o = 0; o < out; ++o) {
            double acc = b ? (*b)[o] : 0.0;
            for (int64_t i = 0; i < in; ++i) acc += double(x[r * in + i]) * double(w[o * in + i]);
            y[r * out + o] = static_cast<float>(acc);
        }
    }
    return y;
}

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int padding) {
    expect(x.rank() == 4 && w.rank() == 4 && w.dim(1) == x.dim(1) && stride >= 1 && padding >= 0, "conv2d", "shapes");
    expect(!b || (b->rank() == 1 && b->dim(0) == w.dim(0)), "conv2d", "bias shape");
    const int64_t n_img = x.dim(0), cin = x.dim(1), h = x.dim(2), wd = x.dim(3);
    const int64_t cout = w.dim(0), kh = w.dim(2), kw = w.dim(3);
    expect(h + 2 * padding >= kh && wd + 2 * padding >= kw, "conv2d", "kernel larger than padded input");
    const int64_t ho = (h + 2 * padding - kh) / stride + 1, wo = (wd + 2 * padding - kw) / stride + 1;
    Tensor y({n_img, cout, ho, wo});
    for (int64_t n = 0; n < n_img; ++n)
        for (int64_t o = 0; o < cout; ++o)
            for (int64_t oy = 0; oy < ho; ++oy)
                for (int64_t ox = 0; ox < wo; ++ox) {
                    double acc = b ? (*b)[o] : 0.0;
                    for (int64_t c = 0; c < cin; ++c)
                        for (int64_t i = 0; i < kh; ++i)
                            for (int64_t j = 0; j < kw; ++j) {
                                const int64_t iy = oy * stride - padding + i, ix = ox * stride - padding + j;
                                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;  // zero padding
                                acc += double(x[((n * cin + c) * h + iy) * wd + ix]) *
                                       double(w[((o * cin + c) * kh + i) * kw + j]);
                            }
                    y[((n * cout + o) * ho + oy) * wo + ox] = static_cast<float>(acc);
                }
    return y;
}

}  // namespace kiln::ops::ref
