#include "text/composable_prompt.h"

#include <optional>

#include "text/python_char_classes.h"
#include "text/python_float.h"
#include "text/unicode.h"

namespace kiln {

namespace {

bool is_number_char(char32_t c) { return c == U'.' || c == U'+' || c == U'-' || python::decimal_digit(c) >= 0; }

// Whether `number` (ASCII) is the whole of [-+]?(?:\d+\.?|\d*\.\d+).
bool is_weight_text(const std::string& number) {
    size_t i = number.empty() || (number[0] != '+' && number[0] != '-') ? 0 : 1;
    size_t digits_before = 0, digits_after = 0, dots = 0;
    for (; i < number.size(); ++i) {
        if (number[i] == '.') {
            if (++dots > 1) return false;
        } else if (number[i] >= '0' && number[i] <= '9') {
            (dots ? digits_after : digits_before)++;
        } else {
            return false;  // a sign after the first character
        }
    }
    return digits_before > 0 || digits_after > 0;
}

// The webui's re_weight, ^((?:\s|.)*?)(?:\s*:\s*([-+]?(?:\d+\.?|\d*\.\d+)))?\s*$, on one part: the shortest
// text after which the rest is whitespace, or whitespace, ':', whitespace, a number, whitespace.
ComposablePart read_part(const std::u32string& s) {
    size_t end = s.size();
    while (end > 0 && python::is_space(s[end - 1])) --end;
    // The number must be the whole run of number characters before the trailing whitespace, since what
    // precedes it is whitespace or the ':'.
    size_t k = end;
    while (k > 0 && is_number_char(s[k - 1])) --k;
    std::string number;
    for (size_t i = k; i < end; ++i) {
        const int digit = python::decimal_digit(s[i]);
        number.push_back(digit >= 0 ? static_cast<char>('0' + digit) : static_cast<char>(s[i]));
    }
    if (k < end && is_weight_text(number)) {
        size_t colon = k;
        while (colon > 0 && python::is_space(s[colon - 1])) --colon;
        if (colon > 0 && s[colon - 1] == U':') {
            size_t text_end = colon - 1;
            while (text_end > 0 && python::is_space(s[text_end - 1])) --text_end;
            // float() reads every text this pattern lets through.
            const std::optional<double> w = python::parse_float(number);
            if (w) return {unicode::encode_utf8(s.substr(0, text_end)), *w};
        }
    }
    return {unicode::encode_utf8(s.substr(0, end)), 1.0};
}

}  // namespace

std::vector<ComposablePart> split_composable_prompt(std::string_view prompt) {
    static const std::u32string kAnd = U"AND";
    const std::u32string s = unicode::decode_utf8(prompt);
    std::vector<ComposablePart> parts;
    size_t part_start = 0;
    for (size_t p = s.find(kAnd); p != std::u32string::npos; p = s.find(kAnd, p + 1)) {
        const size_t after = p + kAnd.size();
        if (p < part_start) continue;  // overlaps the previous match
        if (p > 0 && python::is_word(s[p - 1])) continue;
        if (after < s.size() && python::is_word(s[after])) continue;
        parts.push_back(read_part(s.substr(part_start, p - part_start)));
        part_start = after;
    }
    parts.push_back(read_part(s.substr(part_start)));
    return parts;
}

bool is_composed(const std::vector<ComposablePart>& parts) { return parts.size() != 1 || parts[0].weight != 1.0; }

}  // namespace kiln
