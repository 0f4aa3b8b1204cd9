#include "image/utf8.h"

namespace kiln {

char32_t decode_utf8(std::string_view s, size_t& pos) {
    const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
    const unsigned char lead = byte(pos);
    if (lead < 0x80) {
        ++pos;
        return lead;
    }
    int extra = 0;
    char32_t cp = 0;
    char32_t min_cp = 0;  // smallest value the sequence length may encode (rejects overlong forms)
    if (lead >= 0xC2 && lead <= 0xDF) {
        extra = 1, cp = lead & 0x1F, min_cp = 0x80;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
        extra = 2, cp = lead & 0x0F, min_cp = 0x800;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        extra = 3, cp = lead & 0x07, min_cp = 0x10000;
    } else {
        ++pos;
        return kReplacementChar;
    }
    if (pos + extra >= s.size()) {  // truncated sequence
        ++pos;
        return kReplacementChar;
    }
    for (int i = 1; i <= extra; ++i) {
        const unsigned char c = byte(pos + i);
        if ((c & 0xC0) != 0x80) {
            ++pos;
            return kReplacementChar;
        }
        cp = (cp << 6) | (c & 0x3F);
    }
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        ++pos;
        return kReplacementChar;
    }
    pos += extra + 1;
    return cp;
}

void append_utf8(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

// A literal U+FFFD in the input decodes to the same value as an error; tell them apart by length.
static bool decoded_cleanly(size_t start, size_t end, char32_t cp) {
    return cp != kReplacementChar || end - start == 3;
}

bool is_valid_utf8(std::string_view s) {
    for (size_t pos = 0; pos < s.size();) {
        const size_t start = pos;
        const char32_t cp = decode_utf8(s, pos);
        if (!decoded_cleanly(start, pos, cp)) return false;
    }
    return true;
}

std::string sanitize_utf8(std::string_view s) {
    if (is_valid_utf8(s)) return std::string(s);
    std::string out;
    out.reserve(s.size() + 8);
    for (size_t pos = 0; pos < s.size();) append_utf8(out, decode_utf8(s, pos));
    return out;
}

std::string latin1_to_utf8(std::string_view latin1) {
    std::string out;
    out.reserve(latin1.size() * 2);
    for (char c : latin1) append_utf8(out, static_cast<unsigned char>(c));
    return out;
}

std::optional<std::string> utf8_to_latin1(std::string_view utf8) {
    std::string out;
    out.reserve(utf8.size());
    for (size_t pos = 0; pos < utf8.size();) {
        const size_t start = pos;
        const char32_t cp = decode_utf8(utf8, pos);
        if (!decoded_cleanly(start, pos, cp) || cp > 0xFF) return std::nullopt;
        out += static_cast<char>(cp);
    }
    return out;
}

}  // namespace kiln
