// The pieces of Python's text behaviour that the AUTOMATIC1111 infotext depends on, so that kiln
// writes byte-identical text and reads text the way the WebUI (a Python program) does.
#pragma once
#include <string>
#include <string_view>

namespace kiln {

// str.isspace() / re's \s on str patterns (the full Unicode whitespace set).
bool is_python_space(char32_t c);

// re's \w on str patterns: str.isalnum() or '_'. Exact for ASCII, Latin-1, combining marks and the
// common punctuation, symbol and emoji blocks; other non-ASCII code points count as letters.
bool is_python_word(char32_t c);

// str.strip() with no arguments.
std::string python_strip(std::string_view s);

// json.dumps(s, ensure_ascii=False): quotes and escapes, non-ASCII kept as UTF-8.
std::string python_json_string(std::string_view s);

// repr(float): the shortest text that reads back as the same double, laid out as Python does
// ("7.0", "0.7", "1e-05", "1e+16", "inf", "nan").
std::string python_float_repr(double value);

}  // namespace kiln
