#include "text/prompt_attention.h"

#include <optional>

#include "kiln/error.h"
#include "text/python_char_classes.h"
#include "text/python_float.h"
#include "text/unicode.h"

namespace kiln {

namespace {

constexpr double kRoundMultiplier = 1.1;
constexpr double kSquareMultiplier = 1 / 1.1;

// The characters that end a run of plain text (the pattern's [^\\()\[\]:]+).
bool is_syntax(char32_t c) { return c == U'\\' || c == U'(' || c == U')' || c == U'[' || c == U']' || c == U':'; }

// At a ':', the pattern :\s*([+-]?[.\d]+)\s*\) that closes a round bracket with a weight. Returns the
// weight's text (other scripts' digits as ASCII digits) and sets `end` past the ')'.
std::optional<std::string> weight_close_at(const std::u32string& s, size_t i, size_t& end) {
    size_t j = i + 1;
    while (j < s.size() && python::is_space(s[j])) ++j;
    std::string number;
    if (j < s.size() && (s[j] == U'+' || s[j] == U'-')) number.push_back(static_cast<char>(s[j++]));
    const size_t digits_start = j;
    for (; j < s.size(); ++j) {
        const int digit = python::decimal_digit(s[j]);
        if (s[j] == U'.') number.push_back('.');
        else if (digit >= 0) number.push_back(static_cast<char>('0' + digit));
        else break;
    }
    if (j == digits_start) return std::nullopt;
    while (j < s.size() && python::is_space(s[j])) ++j;
    if (j == s.size() || s[j] != U')') return std::nullopt;
    end = j + 1;
    return number;
}

struct Entry {
    std::u32string text;
    double weight;
};

// A piece of plain text, split where re.split(r"\s*\bBREAK\b\s*", piece) splits it: each BREAK with
// the whitespace around it becomes a BREAK entry between the parts. \b is judged within the piece.
void append_text(std::vector<Entry>& out, const std::u32string& piece) {
    static const std::u32string kBreak = U"BREAK";
    size_t part_start = 0;
    for (size_t p = piece.find(kBreak); p != std::u32string::npos; p = piece.find(kBreak, p + 1)) {
        const size_t after = p + kBreak.size();
        if (p < part_start) continue;  // inside the whitespace an earlier match took
        if (p > 0 && python::is_word(piece[p - 1])) continue;
        if (after < piece.size() && python::is_word(piece[after])) continue;
        size_t cut = p;
        while (cut > part_start && python::is_space(piece[cut - 1])) --cut;
        size_t resume = after;
        while (resume < piece.size() && python::is_space(piece[resume])) ++resume;
        out.push_back({piece.substr(part_start, cut - part_start), 1.0});
        out.push_back({kBreak, -1.0});
        part_start = resume;
    }
    out.push_back({piece.substr(part_start), 1.0});
}

void multiply_from(std::vector<Entry>& entries, size_t start, double multiplier) {
    for (size_t p = start; p < entries.size(); ++p) entries[p].weight *= multiplier;
}

}  // namespace

std::vector<WeightedText> parse_prompt_attention(std::string_view prompt) {
    const std::u32string s = unicode::decode_utf8(prompt);
    std::vector<Entry> entries;
    std::vector<size_t> round, square;  // where each open bracket's range starts
    size_t i = 0;
    while (i < s.size()) {
        const char32_t c = s[i];
        size_t end = i + 1;
        if (c == U'\\') {
            // \( \) \[ \] \\ give the character; a backslash before anything else gives nothing.
            const bool escape = i + 1 < s.size() && (s[i + 1] == U'(' || s[i + 1] == U')' || s[i + 1] == U'[' ||
                                                     s[i + 1] == U']' || s[i + 1] == U'\\');
            entries.push_back({escape ? std::u32string(1, s[i + 1]) : std::u32string(), 1.0});
            end = escape ? i + 2 : i + 1;
        } else if (c == U'(') {
            round.push_back(entries.size());
        } else if (c == U'[') {
            square.push_back(entries.size());
        } else if (c == U':') {
            const std::optional<std::string> weight = weight_close_at(s, i, end);
            if (weight && !round.empty()) {
                const std::optional<double> w = python::parse_float(*weight);
                require(w.has_value(), ErrorKind::InvalidArgument,
                        "prompt: the emphasis weight '" + *weight + "' is not a number");
                multiply_from(entries, round.back(), *w);
                round.pop_back();
            } else {
                if (!weight) end = i + 1;
                append_text(entries, s.substr(i, end - i));
            }
        } else if (c == U')' && !round.empty()) {
            multiply_from(entries, round.back(), kRoundMultiplier);
            round.pop_back();
        } else if (c == U']' && !square.empty()) {
            multiply_from(entries, square.back(), kSquareMultiplier);
            square.pop_back();
        } else if (c == U')' || c == U']') {
            append_text(entries, std::u32string(1, c));
        } else {
            while (end < s.size() && !is_syntax(s[end])) ++end;
            append_text(entries, s.substr(i, end - i));
        }
        i = end;
    }
    // Brackets still open apply to the end, innermost last, as Python walks its lists.
    for (size_t start : round) multiply_from(entries, start, kRoundMultiplier);
    for (size_t start : square) multiply_from(entries, start, kSquareMultiplier);
    if (entries.empty()) entries.push_back({U"", 1.0});

    // Neighbours of equal weight become one (== as Python compares: -0.0 equals 0.0, NaN nothing).
    std::vector<WeightedText> merged;
    for (const Entry& e : entries) {
        if (!merged.empty() && merged.back().weight == e.weight) merged.back().text += unicode::encode_utf8(e.text);
        else merged.push_back({unicode::encode_utf8(e.text), e.weight});
    }
    return merged;
}

bool is_break(const WeightedText& entry) { return entry.weight == -1.0 && entry.text == "BREAK"; }

}  // namespace kiln
