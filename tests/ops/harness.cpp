#include "harness.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace kiln::ops::testing {

uint64_t Rng::next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float Rng::uniform(float lo, float hi) {
    const double unit = static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
    return static_cast<float>(lo + (static_cast<double>(hi) - lo) * unit);
}

Tensor random_tensor(const Shape& shape, uint64_t seed, float lo, float hi) {
    Tensor t(shape);
    Rng rng(seed);
    for (int64_t i = 0; i < t.numel(); ++i) t[i] = rng.uniform(lo, hi);
    return t;
}

Tensor abs_of(const Tensor& t) {
    Tensor a = t;
    for (int64_t i = 0; i < a.numel(); ++i) a[i] = std::fabs(a[i]);
    return a;
}

CheckOutcome compare(const Check& c) {
    CheckOutcome out;
    if (c.actual.shape() != c.expected.shape() || c.bound.shape() != c.expected.shape()) {
        out.ok = false;
        out.message = "shape " + shape_str(c.actual.shape()) + ", expected " + shape_str(c.expected.shape()) +
                      " (bound " + shape_str(c.bound.shape()) + ")";
        return out;
    }
    std::ostringstream msg;
    int reported = 0;
    for (int64_t i = 0; i < c.actual.numel(); ++i) {
        const double a = c.actual[i], e = c.expected[i], b = c.bound[i];
        const bool both_nan = std::isnan(a) && std::isnan(e);
        const double err = both_nan ? 0.0 : (a == e ? 0.0 : std::fabs(a - e));  // a == e covers equal infinities
        const bool ok = both_nan || err <= b;
        if (!std::isnan(err)) {
            out.max_abs_err = std::max(out.max_abs_err, err);
            if (err > 0) out.worst_ratio = std::max(out.worst_ratio, b > 0 ? err / b : INFINITY);
        }
        if (!ok) {
            out.ok = false;
            if (reported++ < 5) msg << "  [" << i << "] actual " << a << " expected " << e << " |err| " << err << " bound " << b << "\n";
        }
    }
    if (!out.ok) out.message = msg.str() + "  (" + std::to_string(reported) + " elements out of bound)";
    return out;
}

}  // namespace kiln::ops::testing
