#include "text/python_char_classes.h"

#include <utf8proc.h>

#include "text/unicode.h"

namespace kiln::python {

bool is_space(char32_t cp) { return unicode::is_whitespace(cp) || (cp >= 0x1C && cp <= 0x1F); }

bool is_word(char32_t cp) { return cp == U'_' || unicode::is_letter(cp) || unicode::is_number(cp); }

int decimal_digit(char32_t cp) {
    if (cp < 0x80) return cp >= U'0' && cp <= U'9' ? static_cast<int>(cp - U'0') : -1;
    auto is_nd = [](char32_t c) {
        return c <= 0x10FFFF && utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_ND;
    };
    if (!is_nd(cp)) return -1;
    // Unicode encodes decimal digits in runs of ten, 0 to 9 in order (a stability guarantee), and some runs
    // follow each other directly (the mathematical digits): the value is the distance to the run's start
    // modulo ten.
    char32_t first = cp;
    while (first > 0 && is_nd(first - 1)) --first;
    return static_cast<int>((cp - first) % 10);
}

}  // namespace kiln::python
