// softmax over the last dim, one row per task: max, e^(x - max) with its sum, then scale.
#include "ops/no_trapping_math.h"  // first: see there
#include <algorithm>

#include "ops/checks.h"
#include "ops/device_ops.h"
#include "ops/ops.h"
#include "ops/parallel.h"
#include "ops/vec_math.h"

namespace kiln::ops {

Tensor softmax_lastdim(const Tensor& x) {
    if (x.on_device()) return device_ops(x).softmax_lastdim(x);
    detail::check(x.rank() >= 1, "softmax_lastdim", detail::desc("x", x) + " must have at least one dim");
    Tensor y(x.shape());
    OpScope scope(OpKind::SoftmaxLastdim);
    if (y.empty()) return y;
    const int64_t n = x.dim(-1), rows = x.numel() / n;
    const float* xp = x.data();
    float* yp = y.data();
    detail::parallel_for(rows, 2 * n, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            const float* src = xp + r * n;
            float* dst = yp + r * n;
            float m = src[0];
#pragma omp simd reduction(max : m)
            for (int64_t i = 0; i < n; ++i) m = std::max(m, src[i]);
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int64_t i = 0; i < n; ++i) {
                const float e = vec::exp_nonpositive(src[i] - m);
                dst[i] = e;
                sum += e;
            }
            const float inv = 1.0f / sum;
#pragma omp simd
            for (int64_t i = 0; i < n; ++i) dst[i] *= inv;
        }
    });
    return y;
}

}  // namespace kiln::ops
