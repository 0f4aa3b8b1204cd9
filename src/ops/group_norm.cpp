// group_norm: per-channel sums in double (one pass), combined per group, then y = x * a + c per
// channel (group_norm_affine gives a and c; conv2d_group_norm_silu applies them as im2col reads).
// Channels, not groups, are the unit of parallel work, so a batch of one image still
// spreads over many threads.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/checks.h"
#include "ops/device_ops.h"
#include "ops/ops.h"
#include "ops/parallel.h"
#include "ops/tuning.h"

namespace kiln::ops {

void detail::group_norm_affine(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta, float eps,
                               std::vector<float>& scale, std::vector<float>& shift) {
    using detail::check;
    using detail::desc;
    check(x.rank() >= 2, "group_norm", desc("x", x) + " must be [N, C, ...]");
    const int64_t n_img = x.dim(0), channels = x.dim(1);
    check(groups >= 1 && channels % groups == 0, "group_norm",
          std::to_string(groups) + " groups must divide the " + std::to_string(channels) + " channels of " + desc("x", x));
    check(gamma.rank() == 1 && gamma.dim(0) == channels, "group_norm",
          desc("gamma", gamma) + " must be [" + std::to_string(channels) + "] for " + desc("x", x));
    check(beta.rank() == 1 && beta.dim(0) == channels, "group_norm",
          desc("beta", beta) + " must be [" + std::to_string(channels) + "] for " + desc("x", x));
    check(eps >= 0.0f, "group_norm", "eps must be >= 0");

    const int64_t planes = n_img * channels;
    scale.assign(planes, 0.0f);
    shift.assign(planes, 0.0f);
    if (planes == 0) return;
    const int64_t spatial = x.numel() / planes;
    std::vector<double> sum(planes, 0.0), sum_sq(planes, 0.0);
    detail::add_plane_sums(x.data(), planes, spatial, spatial, sum.data(), sum_sq.data());
    detail::group_norm_scale_shift(sum, sum_sq, spatial, n_img, channels, groups, gamma, beta, eps, scale, shift);
}

void detail::add_plane_sums(const float* x, int64_t planes, int64_t plane_stride, int64_t length, double* sum,
                            double* sum_sq) {
    const int64_t grain = detail::chunk_items(planes, length);
    // Sum and sum of squares in double: E[x^2] - E[x]^2 then loses about count * 2^-53 * (mean/std)^2
    // of the variance, far below float32's 2^-24 for any activations a network produces.
#pragma omp parallel for schedule(dynamic, grain) if (detail::worth_threads(planes, length))
    for (int64_t p = 0; p < planes; ++p) {
        const float* row = x + p * plane_stride;
        double s = 0.0, s2 = 0.0;
#pragma omp simd reduction(+ : s, s2)
        for (int64_t i = 0; i < length; ++i) {
            const double v = row[i];
            s += v;
            s2 += v * v;
        }
        sum[p] += s;
        sum_sq[p] += s2;
    }
}

void detail::group_norm_scale_shift(const std::vector<double>& sum, const std::vector<double>& sum_sq,
                                    int64_t plane_count, int64_t n_img, int64_t channels, int groups,
                                    const Tensor& gamma, const Tensor& beta, float eps, std::vector<float>& scale,
                                    std::vector<float>& shift) {
    const int64_t per_group = channels / groups;
    const double count = static_cast<double>(per_group * plane_count);
    scale.assign(n_img * channels, 0.0f);
    shift.assign(n_img * channels, 0.0f);
    // Per channel: y = x * scale + shift with scale = gamma * rstd, shift = beta - mean * scale.
    for (int64_t n = 0; n < n_img; ++n) {
        for (int64_t g = 0; g < groups; ++g) {
            double s = 0.0, s2 = 0.0;
            const int64_t c0 = g * per_group;
            for (int64_t c = c0; c < c0 + per_group; ++c) {
                s += sum[n * channels + c];
                s2 += sum_sq[n * channels + c];
            }
            const double mean = s / count;
            const double var = std::max(0.0, s2 / count - mean * mean);  // biased, as torch
            const double rstd = 1.0 / std::sqrt(var + static_cast<double>(eps));
            for (int64_t c = c0; c < c0 + per_group; ++c) {
                const double a = static_cast<double>(gamma[c]) * rstd;
                scale[n * channels + c] = static_cast<float>(a);
                shift[n * channels + c] = static_cast<float>(static_cast<double>(beta[c]) - mean * a);
            }
        }
    }
}

Tensor group_norm(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta, float eps) {
    if (x.on_device()) return device_ops(x).group_norm(x, groups, gamma, beta, eps);
    OpScope op(OpKind::GroupNorm);
    std::vector<float> scale, shift;
    detail::group_norm_affine(x, groups, gamma, beta, eps, scale, shift);
    Tensor y(x.shape());
    const int64_t planes = static_cast<int64_t>(scale.size());
    if (planes == 0) return y;
    const int64_t spatial = x.numel() / planes;
    const float* xp = x.data();
    float* yp = y.data();
    detail::parallel_for(planes, spatial, [&](int64_t begin, int64_t end) {
        for (int64_t p = begin; p < end; ++p) {
            const float a = scale[p], c = shift[p];
            const float* src = xp + p * spatial;
            float* dst = yp + p * spatial;
#pragma omp simd
            for (int64_t i = 0; i < spatial; ++i) dst[i] = src[i] * a + c;
        }
    });
    return y;
}

}  // namespace kiln::ops
