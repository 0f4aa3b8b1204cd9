// Reference group_norm and layer_norm: two-pass mean and biased variance in double.
#include <cmath>

#include "ops/ref/ref_check.h"
#include "ops/ref/ref_ops.h"

namespace kiln::ops::ref {

namespace {

struct Moments {
    double mean, var;
};

Moments moments(const float* p, int64_t count) {
    double s = 0.0;
    for (int64_t i = 0; i < count; ++i) s += p[i];
    const double mean = s / double(count);
    double s2 = 0.0;
    for (int64_t i = 0; i < count; ++i) s2 += (p[i] - mean) * (p[i] - mean);
    return {mean, s2 / double(count)};
}

}  // namespace

Tensor group_norm(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta, float eps) {
    expect(x.rank() >= 2 && groups >= 1 && x.dim(1) % groups == 0, "group_norm", "groups");
    expect(gamma.numel() == x.dim(1) && beta.numel() == x.dim(1), "group_norm", "affine shapes");
    Tensor y(x.shape());
    const int64_t n_img = x.dim(0), channels = x.dim(1);
    if (x.numel() == 0) return y;
    const int64_t spatial = x.numel() / (n_img * channels), per_group = channels / groups;
    const int64_t group_size = per_group * spatial;  // a group's channels are contiguous
    for (int64_t n = 0; n < n_img; ++n)
        for (int64_t g = 0; g < groups; ++g) {
            const int64_t first = (n * channels + g * per_group) * spatial;
            const Moments mo = moments(x.data() + first, group_size);
            const double rstd = 1.0 / std::sqrt(mo.var + eps);
            for (int64_t i = 0; i < group_size; ++i) {
                const int64_t c = g * per_group + i / spatial;
                y[first + i] = static_cast<float>((x[first + i] - mo.mean) * rstd * gamma[c] + beta[c]);
            }
        }
    return y;
}

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps) {
    expect(x.rank() >= 1 && gamma.numel() == x.dim(-1) && beta.numel() == x.dim(-1), "layer_norm", "shapes");
    Tensor y(x.shape());
    const int64_t d = x.dim(-1);
    if (x.numel() == 0) return y;
    for (int64_t r = 0; r < x.numel() / d; ++r) {
        const Moments mo = moments(x.data() + r * d, d);
        const double rstd = 1.0 / std::sqrt(mo.var + eps);
        for (int64_t i = 0; i < d; ++i)
            y[r * d + i] = static_cast<float>((x[r * d + i] - mo.mean) * rstd * gamma[i] + beta[i]);
    }
    return y;
}

}  // namespace kiln::ops::ref
