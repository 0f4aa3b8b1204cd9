// What the tests of ops on a device share with each other (tests/gpu, tests/cuda): inputs rounded to a
// storage dtype, and the comparison of a device result with the host's float32 op under a bound built from
// the arithmetic. tests/gpu/device_ops_test.cpp explains the bound.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace kiln::test {

// The unit roundoff of a storage dtype: 2^-24, 2^-11, 2^-8 for F32, F16, BF16.
inline double unit_roundoff(DType t) {
    return t == DType::F32 ? std::ldexp(1.0, -24) : t == DType::F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
}

// Values uniform in [lo, hi), representable in t (so the host and the device see the same numbers).
inline Tensor random_in(Shape shape, uint32_t seed, DType t, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 g(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
    for (float& x : v) x = d(g);
    return Tensor(std::move(shape), std::move(v)).converted(t).to_f32();
}

inline Tensor abs_of(const Tensor& x) {
    Tensor a = x;
    for (float& v : a.values()) v = std::fabs(v);
    return a;
}

// |dev - ref| <= (k + 2) * 2u * S + factor * us * S + us * |ref| per element, S = abs_sum (the op on |inputs|),
// k the length of the sums, factor the number of intermediate roundings to the storage dtype.
inline void expect_close(const Tensor& dev, const Tensor& ref, const Tensor& abs_sum, double k, DType t,
                         double factor, const std::string& what) {
    ASSERT_EQ(dev.shape(), ref.shape()) << what;
    const double u = std::ldexp(1.0, -24), us = unit_roundoff(t);
    double worst = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) {
        const double bound = (k + 2) * 2 * u * abs_sum[i] + factor * us * abs_sum[i] + us * std::fabs(ref[i]) + 1e-30;
        const double err = std::fabs(double(dev[i]) - ref[i]);
        worst = std::max(worst, std::isnan(err) ? INFINITY : err / bound);
    }
    EXPECT_LE(worst, 1.0) << what << " " << dtype_name(t);
    std::printf("[ device ops ] %-40s %-5s err/bound %.3f\n", what.c_str(), dtype_name(t), worst);
}

}  // namespace kiln::test
