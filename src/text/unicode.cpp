#include "text/unicode.h"

#include <utf8proc.h>

#include <vector>

namespace kiln::unicode {

std::u32string decode_utf8(std::string_view text) {
    std::u32string out;
    out.reserve(text.size());
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    const size_t n = text.size();
    size_t i = 0;
    while (i < n) {
        const unsigned char lead = s[i];
        if (lead < 0x80) {
            out.push_back(lead);
            ++i;
            continue;
        }
        // Lead byte -> sequence length and the allowed range of the second byte (Unicode Table 3-7).
        int len = 0;
        unsigned char lo = 0x80, hi = 0xBF;
        char32_t cp = 0;
        if (lead >= 0xC2 && lead <= 0xDF) {
            len = 2, cp = lead & 0x1F;
        } else if (lead >= 0xE0 && lead <= 0xEF) {
            len = 3, cp = lead & 0x0F;
            if (lead == 0xE0) lo = 0xA0;  // no overlongs
            if (lead == 0xED) hi = 0x9F;  // no surrogates
        } else if (lead >= 0xF0 && lead <= 0xF4) {
            len = 4, cp = lead & 0x07;
            if (lead == 0xF0) lo = 0x90;  // no overlongs
            if (lead == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
        } else {  // a stray continuation byte, C0/C1 (overlong) or F5..FF
            out.push_back(kReplacementChar);
            ++i;
            continue;
        }
        size_t j = i + 1;
        bool ok = true;
        for (int k = 1; k < len; ++k, ++j) {
            const unsigned char lower = k == 1 ? lo : 0x80, upper = k == 1 ? hi : 0xBF;
            if (j >= n || s[j] < lower || s[j] > upper) {
                ok = false;
                break;
            }
            cp = (cp << 6) | (s[j] & 0x3F);
        }
        // On failure the maximal subpart [i, j) becomes one U+FFFD and decoding resumes at the bad byte.
        out.push_back(ok ? cp : kReplacementChar);
        i = j;
    }
    return out;
}

void append_utf8(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

std::string encode_utf8(std::u32string_view text) {
    std::string out;
    out.reserve(text.size());
    for (char32_t cp : text) append_utf8(out, cp);
    return out;
}

std::u32string nfc(const std::u32string& text) {
    bool ascii = true;
    for (char32_t cp : text) ascii = ascii && cp < 0x80;
    if (ascii) return text;  // ASCII is already in NFC; skips the tables for the common prompt

    const std::string utf8 = encode_utf8(text);
    const auto options = static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    std::vector<utf8proc_int32_t> buffer(text.size() * 2 + 8);
    utf8proc_ssize_t count = 0;
    for (;;) {
        count = utf8proc_decompose(reinterpret_cast<const utf8proc_uint8_t*>(utf8.data()),
                                   static_cast<utf8proc_ssize_t>(utf8.size()), buffer.data(),
                                   static_cast<utf8proc_ssize_t>(buffer.size()), options);
        if (count < 0) return text;  // cannot happen for decode_utf8's output; leave the text as it is
        if (static_cast<size_t>(count) <= buffer.size()) break;
        buffer.resize(static_cast<size_t>(count));
    }
    count = utf8proc_normalize_utf32(buffer.data(), count, options);
    if (count < 0) return text;
    return std::u32string(buffer.begin(), buffer.begin() + count);
}

void append_lowercase(std::u32string& out, char32_t cp) {
    if (cp < 0x80) {
        out.push_back(cp >= 'A' && cp <= 'Z' ? cp + ('a' - 'A') : cp);
    } else if (cp == 0x0130) {  // LATIN CAPITAL LETTER I WITH DOT ABOVE: SpecialCasing.txt, unconditional
        out.push_back(U'i');
        out.push_back(0x0307);
    } else {
        out.push_back(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    }
}

bool is_whitespace(char32_t cp) {
    if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
    if (cp == 0x85) return true;
    const utf8proc_category_t c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

bool is_letter(char32_t cp) {
    if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    const utf8proc_category_t c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT ||
           c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_LO;
}

bool is_number(char32_t cp) {
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    const utf8proc_category_t c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

}  // namespace kiln::unicode
