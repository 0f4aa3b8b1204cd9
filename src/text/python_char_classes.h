// The character classes of Python's `re` module on str patterns, which AUTOMATIC1111's prompt syntax is
// written in: \s, \w (and so \b) and \d are Unicode-aware there, unlike their ASCII meaning elsewhere.
#pragma once

namespace kiln::python {

// \s: what str.isspace() accepts. Unicode's White_Space plus U+001C..U+001F, which Python counts as
// separators.
bool is_space(char32_t cp);

// \w: a letter (L*), a number (N*) or '_'.
bool is_word(char32_t cp);

// \d matches a decimal digit (Nd) of any script, and float() reads it as its digit value: 0..9, or -1
// for anything else.
int decimal_digit(char32_t cp);

}  // namespace kiln::python
