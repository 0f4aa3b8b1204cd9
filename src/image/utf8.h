// UTF-8 <-> Latin-1 conversions for PNG text chunks, whose tEXt/zTXt payloads are Latin-1 by the
// PNG spec while everything inside kiln is UTF-8.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace kiln {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Decodes the code point at `pos` and advances `pos` past it. An ill-formed sequence (bad lead or
// continuation byte, overlong form, surrogate, > U+10FFFF, truncation) yields U+FFFD and advances
// one byte, so callers can always make progress.
char32_t decode_utf8(std::string_view s, size_t& pos);

void append_utf8(std::string& out, char32_t cp);

bool is_valid_utf8(std::string_view s);

// Ill-formed bytes become U+FFFD; valid text is returned unchanged.
std::string sanitize_utf8(std::string_view s);

// Each byte is the code point of the same value.
std::string latin1_to_utf8(std::string_view latin1);

// nullopt when `utf8` is ill-formed or holds a code point above U+00FF.
std::optional<std::string> utf8_to_latin1(std::string_view utf8);

}  // namespace kiln
