#include "image/python_text.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "image/utf8.h"

namespace kiln {

bool is_python_space(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_python_word(char32_t c) {
    if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    if (c < 0xC0) {  // Latin-1 punctuation and symbols, except the letters and digits among them
        return c == 0xAA || c == 0xB2 || c == 0xB3 || c == 0xB5 || c == 0xB9 || c == 0xBA || (c >= 0xBC && c <= 0xBE);
    }
    if (c == 0xD7 || c == 0xF7) return false;  // multiplication and division signs
    struct Range {
        char32_t first, last;
    };
    // Blocks (or parts) whose characters are all punctuation, symbols, marks or private use.
    static constexpr Range kNonWord[] = {
        {0x0300, 0x036F},  {0x2000, 0x206F},  {0x20A0, 0x20FF},  {0x2190, 0x245F},  {0x2500, 0x2775},
        {0x2794, 0x2BFF},  {0x2E00, 0x2E7F},  {0x3000, 0x3004},  {0x3008, 0x3020},  {0x3030, 0x3030},
        {0xE000, 0xF8FF},  {0xFE00, 0xFE0F},  {0xFE10, 0xFE1F},  {0xFE30, 0xFE6F},  {0xFF00, 0xFF0F},
        {0xFF1A, 0xFF20},  {0xFF3B, 0xFF40},  {0xFF5B, 0xFF65},  {0xFFF0, 0xFFFF},  {0x1F000, 0x1FAFF},
        {0xE0000, 0xE007F}, {0xF0000, 0x10FFFF},
    };
    for (const Range& r : kNonWord)
        if (c >= r.first && c <= r.last) return false;
    return true;
}

std::string python_strip(std::string_view s) {
    size_t begin = 0;
    while (begin < s.size()) {
        size_t next = begin;
        if (!is_python_space(decode_utf8(s, next))) break;
        begin = next;
    }
    size_t end = begin;  // end of the last non-space code point
    for (size_t pos = begin; pos < s.size();) {
        if (!is_python_space(decode_utf8(s, pos))) end = pos;
    }
    return std::string(s.substr(begin, end - begin));
}

std::string python_json_string(std::string_view s) {
    std::string out = "\"";
    for (char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20) {
                    char escape[8];
                    std::snprintf(escape, sizeof escape, "\\u%04x", c);
                    out += escape;
                } else {
                    out += ch;
                }
        }
    }
    return out + "\"";
}

std::string python_float_repr(double value) {
    if (std::isnan(value)) return "nan";
    if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
    // Shortest round-trip digits, as "d.ddde+XX"; both this and Python pick the digits closest to
    // the exact value among the shortest that round-trip.
    char buf[64];
    const auto result = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
    const std::string_view sci(buf, result.ptr - buf);
    const size_t e = sci.find('e');
    const std::string sign = value < 0 || std::signbit(value) ? "-" : "";
    std::string digits;
    for (char c : sci.substr(0, e))
        if (c >= '0' && c <= '9') digits += c;
    const int exponent = std::atoi(std::string(sci.substr(e + 1)).c_str());
    const int point = exponent + 1;  // digits = 0.ddd x 10^point
    const int n = static_cast<int>(digits.size());
    if (point > -4 && point <= 16) {  // CPython's float_repr_style 'short' switches at these bounds
        if (point <= 0) return sign + "0." + std::string(-point, '0') + digits;
        if (point >= n) return sign + digits + std::string(point - n, '0') + ".0";
        return sign + digits.substr(0, point) + "." + digits.substr(point);
    }
    std::string mantissa = digits;
    if (n > 1) mantissa.insert(1, 1, '.');
    char exp_text[16];
    std::snprintf(exp_text, sizeof exp_text, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return sign + mantissa + exp_text;
}

}  // namespace kiln
