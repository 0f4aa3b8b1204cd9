// Shared pieces of the ops tests: deterministic inputs and the elementwise error-bound comparison.
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace kiln::ops::testing {

// Unit roundoff of float32 with round-to-nearest: fl(x) = x (1 + d) with |d| <= 2^-24.
constexpr double kU = 1.0 / 16777216.0;

// A deterministic stream (splitmix64) of uniform floats, so failures reproduce everywhere.
class Rng {
public:
    explicit Rng(uint64_t seed) : state_(seed) {}
    uint64_t next();
    float uniform(float lo, float hi);  // in [lo, hi)

private:
    uint64_t state_;
};

// Uniform values in [lo, hi).
Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
Tensor abs_of(const Tensor& t);

// An op's result, the reference's, and a per-element bound on |actual - expected| (same shape).
struct Check {
    Tensor actual, expected, bound;
};

struct CheckOutcome {
    bool ok = true;
    std::string message;      // the first violations, with index and values, when !ok
    double max_abs_err = 0;   // max |actual - expected|
    double worst_ratio = 0;   // max |actual - expected| / bound (0 where both are 0)
};

// Passes iff shapes agree and every |actual - expected| <= bound (NaN only where expected is NaN).
CheckOutcome compare(const Check& check);

}  // namespace kiln::ops::testing
