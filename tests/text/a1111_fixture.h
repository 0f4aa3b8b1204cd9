// Reads a1111_prompt_syntax.json (tests/data/prompt-syntax/a1111_prompt_syntax.tar.xz, unpacked by the build):
// AUTOMATIC1111's own results for the prompt syntax (tools/prompt-syntax/scripts.tar.xz: make_fixtures.py; the folder's README
// says how and from which commit).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace kiln::test {

inline const nlohmann::json& a1111_fixture() {
    static const nlohmann::json fixture = [] {
        const std::string path = KILN_PROMPT_SYNTAX_DATA;
        std::ifstream in(path, std::ios::binary);
        EXPECT_TRUE(in.good()) << path;
        std::ostringstream text;
        text << in.rdbuf();
        return nlohmann::json::parse(text.str());
    }();
    return fixture;
}

// A float as the fixture writes it: a number, or "inf", "-inf", "nan".
inline double fixture_double(const nlohmann::json& value) {
    if (value.is_number()) return value.get<double>();
    const std::string s = value.get<std::string>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    return s == "inf" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
}

// Exactly the same double: kiln multiplies the weights in the order Python does, so they are equal to the
// last bit (a NaN matches a NaN, -0.0 does not match 0.0). The fixture's numbers are Python's shortest
// round-tripping reprs, which parse back to the very double.
inline bool same_double(double a, double b) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
    return a == b && std::signbit(a) == std::signbit(b);
}

// The fixture writes runs of four or more equal values as [value, count].
inline std::vector<nlohmann::json> expand_runs(const nlohmann::json& values) {
    std::vector<nlohmann::json> out;
    for (const nlohmann::json& v : values) {
        if (v.is_array()) out.insert(out.end(), v.at(1).get<size_t>(), v.at(0));
        else out.push_back(v);
    }
    return out;
}

}  // namespace kiln::test
