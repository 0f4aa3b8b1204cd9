// Reference elementwise ops, activations, GEGLU and softmax, in double with libm's functions.
#include <algorithm>
#include <cmath>

#include "ops/ref/ref_check.h"
#include "ops/ref/ref_ops.h"

namespace kiln::ops::ref {

namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
// 0.5 x (1 + erf(x / sqrt 2)), with 1 + erf(z) = erfc(-z) so that the tail for x < 0 keeps its digits.
double gelu(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
constexpr double kPi = 3.14159265358979323846;

template <class F>
void map(Tensor& x, F f) {
    for (int64_t i = 0; i < x.numel(); ++i) x[i] = static_cast<float>(f(double(x[i])));
}

}  // namespace

void silu_(Tensor& x) { map(x, [](double v) { return v * sigmoid(v); }); }
void gelu_(Tensor& x) { map(x, gelu); }
void gelu_tanh_(Tensor& x) {
    map(x, [](double v) {
        const double u = std::sqrt(2.0 / kPi) * (v + 0.044715 * v * v * v);
        // 1 + tanh(u), written for u < 0 as the equal 2 e^{2u} / (1 + e^{2u}): the sum cancels to nothing
        // in double once u < -19 while the true value is still far above float's range.
        const double one_plus_tanh = u >= 0 ? 1.0 + std::tanh(u) : 2.0 * std::exp(2 * u) / (1.0 + std::exp(2 * u));
        return 0.5 * v * one_plus_tanh;
    });
}
void quick_gelu_(Tensor& x) { map(x, [](double v) { return v * sigmoid(1.702 * v); }); }

Tensor geglu(const Tensor& x) {
    expect(x.rank() >= 1 && x.dim(-1) % 2 == 0, "geglu", "last dim must be even");
    const int64_t n = x.dim(-1) / 2;
    Shape shape = x.shape();
    shape.back() = n;
    Tensor y(shape);
    if (n == 0) return y;
    for (int64_t r = 0; r < y.numel() / n; ++r)
        for (int64_t i = 0; i < n; ++i)
            y[r * n + i] = static_cast<float>(double(x[r * 2 * n + i]) * gelu(x[r * 2 * n + n + i]));
    return y;
}

void add_(Tensor& a, const Tensor& b) {
    expect(a.shape() == b.shape(), "add_", "shapes differ");
    for (int64_t i = 0; i < a.numel(); ++i) a[i] = static_cast<float>(double(a[i]) + double(b[i]));
}

void add_channel_bias_(Tensor& x, const Tensor& bias_nc) {
    expect(x.rank() >= 2 && bias_nc.rank() == 2 && bias_nc.dim(0) == x.dim(0) && bias_nc.dim(1) == x.dim(1),
           "add_channel_bias_", "shapes");
    const int64_t planes = x.dim(0) * x.dim(1);
    if (planes == 0) return;
    const int64_t spatial = x.numel() / planes;
    for (int64_t i = 0; i < x.numel(); ++i) x[i] = static_cast<float>(double(x[i]) + double(bias_nc[i / spatial]));
}

void scale_(Tensor& x, float s) { map(x, [s](double v) { return v * s; }); }

Tensor softmax_lastdim(const Tensor& x) {
    expect(x.rank() >= 1, "softmax_lastdim", "rank 0");
    Tensor y(x.shape());
    const int64_t n = x.dim(-1);
    if (x.numel() == 0) return y;
    for (int64_t r = 0; r < x.numel() / n; ++r) {
        double m = -INFINITY, sum = 0.0;
        for (int64_t i = 0; i < n; ++i) m = std::max(m, double(x[r * n + i]));
        for (int64_t i = 0; i < n; ++i) sum += std::exp(x[r * n + i] - m);
        for (int64_t i = 0; i < n; ++i) y[r * n + i] = static_cast<float>(std::exp(x[r * n + i] - m) / sum);
    }
    return y;
}

}  // namespace kiln::ops::ref
