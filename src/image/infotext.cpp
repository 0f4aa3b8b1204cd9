#include "image/infotext.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "image/python_text.h"
#include "image/utf8.h"
#include "kiln/error.h"

namespace kiln {
namespace {

constexpr std::string_view kNegativePrefix = "Negative prompt:";

// The WebUI's `quote`: only values that would break the "k: v, k: v" line get JSON quotes.
std::string quote_value(const std::string& value) {
    if (value.find_first_of(",\n:") == std::string::npos) return value;
    return python_json_string(value);
}

using KeyValues = std::vector<std::pair<std::string, std::string>>;

// re.findall of the WebUI's parameter pattern
//   \s*(\w[\w \-/]+):\s*("(?:\\.|[^\\"])+"|[^,]*)(?:,|$)
// over one line, written out by hand: std::regex has no Unicode classes and recurses per character.
// Works on code points so that \w and \s see characters, not bytes.
KeyValues find_parameter_pairs(std::string_view line) {
    std::vector<char32_t> cp;
    std::vector<size_t> offset;  // byte offset of each code point, plus the end
    for (size_t pos = 0; pos < line.size();) {
        offset.push_back(pos);
        cp.push_back(decode_utf8(line, pos));
    }
    offset.push_back(line.size());
    const size_t n = cp.size();
    const auto slice = [&](size_t from, size_t to) { return std::string(line.substr(offset[from], offset[to] - offset[from])); };
    const auto key_char = [](char32_t c) { return is_python_word(c) || c == ' ' || c == '-' || c == '/'; };

    KeyValues found;
    size_t p = 0;
    while (p < n) {
        size_t key_start = p;
        while (key_start < n && is_python_space(cp[key_start])) ++key_start;
        if (key_start >= n || !is_python_word(cp[key_start])) {
            ++p;
            continue;
        }
        size_t key_end = key_start + 1;
        while (key_end < n && key_char(cp[key_end])) ++key_end;
        if (key_end == key_start + 1 || key_end >= n || cp[key_end] != ':') {
            // Every start before key_end runs into the same non-key character, so skip them all.
            p = std::max(p + 1, key_end);
            continue;
        }
        size_t value_start = key_end + 1;
        while (value_start < n && is_python_space(cp[value_start])) ++value_start;

        size_t value_end = 0, match_end = 0;
        bool quoted = false;
        if (value_start < n && cp[value_start] == '"') {  // first alternative: "(?:\\.|[^\\"])+"
            size_t k = value_start + 1;
            while (k < n && cp[k] != '"') {
                if (cp[k] == '\\') {
                    if (k + 1 >= n || cp[k + 1] == '\n') break;  // '.' does not match a newline
                    k += 2;
                } else {
                    ++k;
                }
            }
            const bool closed = k < n && cp[k] == '"' && k > value_start + 1;
            if (closed && (k + 1 == n || cp[k + 1] == ',')) {  // then (?:,|$)
                quoted = true;
                value_end = k + 1;
                match_end = k + 1 == n ? n : k + 2;
            }
        }
        if (!quoted) {  // second alternative: [^,]*
            value_end = value_start;
            while (value_end < n && cp[value_end] != ',') ++value_end;
            match_end = value_end == n ? n : value_end + 1;
        }
        found.emplace_back(slice(key_start, key_end), slice(value_start, value_end));
        p = match_end;
    }
    return found;
}

// The WebUI's `unquote`: a value in double quotes is a JSON string; if it does not decode, keep it.
std::string unquote_value(const std::string& value) {
    if (value.size() < 2 || value.front() != '"' || value.back() != '"') return value;
    const nlohmann::json decoded = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
    return decoded.is_string() ? decoded.get<std::string>() : value;
}

std::vector<std::string_view> split_lines(std::string_view text) {
    std::vector<std::string_view> lines;
    size_t start = 0;
    for (size_t nl; (nl = text.find('\n', start)) != std::string_view::npos; start = nl + 1)
        lines.push_back(text.substr(start, nl - start));
    lines.push_back(text.substr(start));
    return lines;
}

}  // namespace

std::string format_number(int64_t value) { return std::to_string(value); }

std::string format_number(double value) { return python_float_repr(value); }

std::string format_infotext(const GenerationParameters& parameters) {
    std::string line;
    for (const auto& [key, value] : parameters.params) {
        require(!key.empty() && key.find_first_of(",:\n") == std::string::npos, ErrorKind::InvalidArgument,
                "generation parameter name \"" + key + "\" must be non-empty and free of ',', ':' and newlines");
        if (!line.empty()) line += ", ";
        line += key == value ? key : key + ": " + quote_value(value);
    }
    std::string text = parameters.prompt;
    if (!parameters.negative_prompt.empty()) text += "\nNegative prompt: " + parameters.negative_prompt;
    return python_strip(text + "\n" + line);
}

GenerationParameters parse_infotext(const std::string& text) {
    const std::string stripped = python_strip(text);
    std::vector<std::string_view> lines = split_lines(stripped);
    KeyValues pairs = find_parameter_pairs(lines.back());
    if (pairs.size() >= 3) lines.pop_back();
    else pairs.clear();

    GenerationParameters result;
    bool in_negative = false;
    for (std::string_view raw : lines) {
        std::string line = python_strip(raw);
        if (line.starts_with(kNegativePrefix)) {
            in_negative = true;
            line = python_strip(std::string_view(line).substr(kNegativePrefix.size()));
        }
        std::string& target = in_negative ? result.negative_prompt : result.prompt;
        if (!target.empty()) target += '\n';
        target += line;
    }
    for (auto& [key, value] : pairs) {
        if (value.empty()) continue;  // the WebUI fails on v[0] and skips the key
        std::string decoded = unquote_value(value);
        auto same_key = [&](const auto& kv) { return kv.first == key; };
        auto existing = std::find_if(result.params.begin(), result.params.end(), same_key);
        if (existing != result.params.end()) existing->second = std::move(decoded);
        else result.params.emplace_back(key, std::move(decoded));
    }
    return result;
}

}  // namespace kiln
