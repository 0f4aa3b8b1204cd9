// layer_norm over the last dim: one row per task, statistics accumulated in double.
#include <algorithm>
#include <cmath>

#include "ops/checks.h"
#include "ops/device_ops.h"
#include "ops/ops.h"
#include "ops/parallel.h"

namespace kiln::ops {

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps) {
    if (x.on_device()) return device_ops(x).layer_norm(x, gamma, beta, eps);
    using detail::check;
    using detail::desc;
    check(x.rank() >= 1, "layer_norm", desc("x", x) + " must have at least one dim");
    const int64_t d = x.dim(-1);
    check(gamma.rank() == 1 && gamma.dim(0) == d, "layer_norm",
          desc("gamma", gamma) + " must be [" + std::to_string(d) + "] for " + desc("x", x));
    check(beta.rank() == 1 && beta.dim(0) == d, "layer_norm",
          desc("beta", beta) + " must be [" + std::to_string(d) + "] for " + desc("x", x));
    check(eps >= 0.0f, "layer_norm", "eps must be >= 0");

    Tensor y(x.shape());
    OpScope scope(OpKind::LayerNorm);
    if (y.empty()) return y;
    const int64_t rows = x.numel() / d;
    const float* xp = x.data();
    const float* gp = gamma.data();
    const float* bp = beta.data();
    float* yp = y.data();
    detail::parallel_for(rows, 2 * d, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            const float* src = xp + r * d;
            float* dst = yp + r * d;
            // Double sums, see group_norm: E[x^2] - E[x]^2 is safe at 53 bits.
            double s = 0.0, s2 = 0.0;
#pragma omp simd reduction(+ : s, s2)
            for (int64_t i = 0; i < d; ++i) {
                const double v = src[i];
                s += v;
                s2 += v * v;
            }
            const double mean = s / static_cast<double>(d);
            const double var = std::max(0.0, s2 / static_cast<double>(d) - mean * mean);
            const float rstd = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps)));
            const float m = static_cast<float>(mean);
            for (int64_t i = 0; i < d; ++i) dst[i] = (src[i] - m) * rstd * gp[i] + bp[i];
        }
    });
    return y;
}

}  // namespace kiln::ops
