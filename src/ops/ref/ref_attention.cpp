// Reference attention: the whole score row for each query, softmax and weighted sum in double.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/ref/ref_check.h"
#include "ops/ref/ref_ops.h"

namespace kiln::ops::ref {

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, int heads, bool causal) {
    expect(q.rank() == 3 && k.rank() == 3 && v.rank() == 3, "attention", "ranks");
    expect(q.dim(0) == k.dim(0) && k.dim(0) == v.dim(0) && k.dim(1) == v.dim(1), "attention", "batch/length");
    expect(q.dim(2) == k.dim(2) && k.dim(2) == v.dim(2) && heads >= 1 && q.dim(2) % heads == 0, "attention", "width");
    const int64_t batch = q.dim(0), lq = q.dim(1), lk = k.dim(1), width = q.dim(2), d = width / heads;
    expect(lk >= 1 && d >= 1, "attention", "empty keys or heads");
    Tensor out({batch, lq, width});
    std::vector<double> p(lk);
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t i = 0; i < lq; ++i) {
                const int64_t visible = causal ? std::min(lk, i + 1) : lk;  // key j is masked when j > i
                double m = -INFINITY;
                for (int64_t j = 0; j < visible; ++j) {
                    double s = 0.0;
                    for (int64_t c = 0; c < d; ++c)
                        s += double(q[(b * lq + i) * width + h * d + c]) * double(k[(b * lk + j) * width + h * d + c]);
                    p[j] = s / std::sqrt(double(d));
                    m = std::max(m, p[j]);
                }
                double sum = 0.0;
                for (int64_t j = 0; j < visible; ++j) sum += (p[j] = std::exp(p[j] - m));
                for (int64_t c = 0; c < d; ++c) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < visible; ++j) acc += p[j] * double(v[(b * lk + j) * width + h * d + c]);
                    out[(b * lq + i) * width + h * d + c] = static_cast<float>(acc / sum);
                }
            }
    return out;
}

}  // namespace kiln::ops::ref
