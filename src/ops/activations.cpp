// In-place activations and GEGLU: one pass, vectorised through vec_math.h.
#include "ops/no_trapping_math.h"  // first: see there
#include "ops/checks.h"
#include "ops/device_ops.h"
#include "ops/ops.h"
#include "ops/parallel.h"
#include "ops/vec_math.h"

namespace kiln::ops {

namespace {

template <class F>
void map_inplace(Tensor& x, F f) {
    float* p = x.data();
    detail::parallel_for(x.numel(), 1, [&](int64_t begin, int64_t end) {
#pragma omp simd
        for (int64_t i = begin; i < end; ++i) p[i] = f(p[i]);
    });
}

}  // namespace

void silu_(Tensor& x) {
    if (x.on_device()) return device_ops(x).activation_(x, DeviceActivation::Silu);
    OpScope scope(OpKind::Silu);
    map_inplace(x, [](float v) { return v * vec::sigmoid(v); });
}

void gelu_(Tensor& x) {
    if (x.on_device()) return device_ops(x).activation_(x, DeviceActivation::Gelu);
    OpScope scope(OpKind::Gelu);
    map_inplace(x, [](float v) { return vec::gelu(v); });
}

void gelu_tanh_(Tensor& x) {
    if (x.on_device()) return device_ops(x).activation_(x, DeviceActivation::GeluTanh);
    OpScope scope(OpKind::GeluTanh);
    map_inplace(x, [](float v) { return vec::gelu_tanh(v); });
}

void quick_gelu_(Tensor& x) {
    if (x.on_device()) return device_ops(x).activation_(x, DeviceActivation::QuickGelu);
    OpScope scope(OpKind::QuickGelu);
    map_inplace(x, [](float v) { return v * vec::sigmoid(1.702f * v); });
}

Tensor geglu(const Tensor& x) {
    using detail::check;
    using detail::desc;
    check(x.rank() >= 1 && x.dim(-1) % 2 == 0, "geglu", desc("x", x) + ": the last dim must be even ([..., 2n])");
    if (x.on_device()) return device_ops(x).geglu(x);
    const int64_t n = x.dim(-1) / 2;
    Shape shape = x.shape();
    shape.back() = n;
    Tensor y(shape);
    OpScope scope(OpKind::Geglu);
    if (y.empty()) return y;
    const int64_t rows = y.numel() / n;
    const float* xp = x.data();
    float* yp = y.data();
    detail::parallel_for(rows, 3 * n, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            const float* value = xp + r * 2 * n;
            const float* gate = value + n;
            float* dst = yp + r * n;
#pragma omp simd
            for (int64_t i = 0; i < n; ++i) dst[i] = value[i] * vec::gelu(gate[i]);
        }
    });
    return y;
}

}  // namespace kiln::ops
