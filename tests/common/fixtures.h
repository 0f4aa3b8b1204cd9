// Helpers shared by the conformance tests: paths into tests/data and tensor comparison.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

#include <cstdlib>

#include <nlohmann/json.hpp>

#include "core/tensor.h"

namespace kiln::test {

// The fixtures' folder: where the build unpacked them, or $KILN_TEST_DATA (binaries run on another machine,
// scripts/run-on-device.sh).
inline std::string data_path(const std::string& rel) {
    const char* moved = std::getenv("KILN_TEST_DATA");
    return std::string(moved && *moved ? moved : KILN_TEST_DATA) + "/" + rel;
}

inline nlohmann::json read_json(const std::string& path) {
    std::ifstream f(path);
    return nlohmann::json::parse(f);
}

// max |a - b| / max |b|: the error relative to the reference's scale, which is what float32
// arithmetic bounds (elementwise relative error is meaningless near zero crossings).
inline double relative_error(const Tensor& a, const Tensor& b) {
    EXPECT_EQ(a.shape(), b.shape());
    if (a.shape() != b.shape()) return INFINITY;
    double diff = 0, scale = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
        diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
        scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
        if (std::isnan(a[i])) return INFINITY;
    }
    return scale > 0 ? diff / scale : diff;
}

// ||a - b|| / ||b|| over all elements: the error of the tensor as a whole, beside relative_error's worst element.
inline double relative_l2_error(const Tensor& a, const Tensor& b) {
    EXPECT_EQ(a.shape(), b.shape());
    if (a.shape() != b.shape()) return INFINITY;
    double d = 0, r = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
        d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        r += double(b[i]) * b[i];
    }
    return r > 0 ? std::sqrt(d / r) : INFINITY;
}

}  // namespace kiln::test
