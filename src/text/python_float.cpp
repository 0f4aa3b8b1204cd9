#include "text/python_float.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

namespace kiln::python {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

std::optional<double> parse_float(std::string_view text) {
    size_t i = 0;
    const bool negative = i < text.size() && text[i] == '-';
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    // Mantissa: digits with at most one '.', at least one digit.
    const size_t mantissa_start = i;
    size_t digits = 0, dot = std::string_view::npos;
    for (; i < text.size() && (is_digit(text[i]) || text[i] == '.'); ++i) {
        if (text[i] != '.') ++digits;
        else if (dot != std::string_view::npos) return std::nullopt;
        else dot = i;
    }
    if (digits == 0) return std::nullopt;
    const std::string_view mantissa = text.substr(mantissa_start, i - mantissa_start);
    // Exponent: e or E, an optional sign, at least one digit. Kept saturated: only its sign and size matter
    // when the value is out of range.
    int64_t exponent = 0;
    if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
        ++i;
        const bool exp_negative = i < text.size() && text[i] == '-';
        if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
        const size_t exp_start = i;
        for (; i < text.size() && is_digit(text[i]); ++i)
            exponent = std::min<int64_t>(exponent * 10 + (text[i] - '0'), 1'000'000'000);
        if (i == exp_start) return std::nullopt;
        if (exp_negative) exponent = -exponent;
    }
    if (i != text.size()) return std::nullopt;

    // from_chars reads the same syntax (but no leading '+') without looking at the locale.
    const std::string unsigned_text(text.substr(mantissa_start));
    double value = 0;
    const auto [end, ec] = std::from_chars(unsigned_text.data(), unsigned_text.data() + unsigned_text.size(), value);
    if (ec == std::errc::result_out_of_range) {
        // Out of range is either above the largest double (Python gives inf) or below half the smallest
        // (Python gives 0). Which: where the first non-zero digit stands, relative to the units digit.
        const size_t int_digits = dot == std::string_view::npos ? mantissa.size() : dot - mantissa_start;
        int64_t position = 0;  // 1 for the units digit, 2 for tens, 0 for tenths, -1 for hundredths...
        for (size_t k = 0; k < mantissa.size(); ++k) {
            if (mantissa[k] == '.' || mantissa[k] == '0') continue;
            position = k < int_digits ? static_cast<int64_t>(int_digits - k)
                                      : -static_cast<int64_t>(k - int_digits - 1);
            break;
        }
        value = position + exponent >= 1 ? std::numeric_limits<double>::infinity() : 0.0;
    } else if (ec != std::errc() || end != unsigned_text.data() + unsigned_text.size()) {
        return std::nullopt;  // cannot happen after the checks above
    }
    return negative ? -value : value;
}

}  // namespace kiln::python
