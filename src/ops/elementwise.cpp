// In-place elementwise arithmetic: add_, add_channel_bias_, scale_.
#include "ops/checks.h"
#include "ops/device_ops.h"
#include "ops/ops.h"
#include "ops/parallel.h"

namespace kiln::ops {

void add_(Tensor& a, const Tensor& b) {
    detail::check(a.shape() == b.shape(), "add_",
                  detail::desc("a", a) + " and " + detail::desc("b", b) + " must have the same shape");
    if (a.on_device()) return device_ops(a).add_(a, b);
    OpScope scope(OpKind::Add);
    float* ap = a.data();
    const float* bp = b.data();
    detail::parallel_for(a.numel(), 1, [&](int64_t begin, int64_t end) {
#pragma omp simd
        for (int64_t i = begin; i < end; ++i) ap[i] += bp[i];
    });
}

void add_channel_bias_(Tensor& x, const Tensor& bias_nc) {
    using detail::desc;
    detail::check(x.rank() >= 2 && bias_nc.rank() == 2 && bias_nc.dim(0) == x.dim(0) && bias_nc.dim(1) == x.dim(1),
                  "add_channel_bias_", desc("x", x) + " [N, C, ...] and " + desc("bias", bias_nc) + " [N, C] disagree");
    if (x.on_device()) return device_ops(x).add_channel_bias_(x, bias_nc);
    OpScope scope(OpKind::AddChannelBias);
    const int64_t planes = x.dim(0) * x.dim(1);
    if (planes == 0) return;
    const int64_t spatial = x.numel() / planes;
    float* xp = x.data();
    const float* bp = bias_nc.data();
    detail::parallel_for(planes, spatial, [&](int64_t begin, int64_t end) {
        for (int64_t p = begin; p < end; ++p) {
            const float v = bp[p];
            float* row = xp + p * spatial;
#pragma omp simd
            for (int64_t i = 0; i < spatial; ++i) row[i] += v;
        }
    });
}

void scale_(Tensor& x, float s) {
    if (x.on_device()) return device_ops(x).scale_(x, s);
    OpScope scope(OpKind::Scale);
    float* p = x.data();
    detail::parallel_for(x.numel(), 1, [&](int64_t begin, int64_t end) {
#pragma omp simd
        for (int64_t i = begin; i < end; ++i) p[i] *= s;
    });
}

}  // namespace kiln::ops
