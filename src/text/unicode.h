// The few Unicode operations CLIP's text normalisation needs: tolerant UTF-8 decoding, NFC, lowercasing
// and the general categories of the pre-tokenizer pattern (\s, \p{L}, \p{N}).
#pragma once
#include <string>
#include <string_view>

namespace kiln::unicode {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Decodes UTF-8, replacing each maximal ill-formed subsequence with U+FFFD (the Unicode standard's
// recommended practice, also what Python's bytes.decode(errors="replace") does), so any byte string is
// accepted. Overlong forms, surrogates and code points above U+10FFFF count as ill-formed.
std::u32string decode_utf8(std::string_view text);

void append_utf8(std::string& out, char32_t cp);
std::string encode_utf8(std::u32string_view text);

// Canonical composition (NFC) of a string of valid code points.
std::u32string nfc(const std::u32string& text);

// Full lowercase mapping of one code point, as Rust's char::to_lowercase (which the tokenizers library
// uses): the simple mapping except U+0130, whose lowercase is two code points. No context (final sigma).
void append_lowercase(std::u32string& out, char32_t cp);

bool is_whitespace(char32_t cp);  // Unicode White_Space, which is what \s matches in Oniguruma
bool is_letter(char32_t cp);      // \p{L}: Lu, Ll, Lt, Lm, Lo
bool is_number(char32_t cp);      // \p{N}: Nd, Nl, No

}  // namespace kiln::unicode
