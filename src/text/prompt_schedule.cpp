#include "text/prompt_schedule.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "kiln/error.h"
#include "text/python_char_classes.h"
#include "text/python_float.h"
#include "text/unicode.h"

// How the webui's grammar reads a prompt, restated without a general parser. A prompt is text and bracket
// groups; inside a group everything must be valid:
//   ( p )   ( p : p )   [ p ]                 emphasis, kept as text
//   [ p : N ]   [ p : p : N ]                 an edit; N is a number with optional whitespace around it
//   [ p | p ... ]  (parts may be empty)       an alternation
// where each p is again text and valid groups, with no ':' or '|' of its own. Outside groups, the brackets
// and ':' that belong to no valid group are text; a '|' outside an alternation, or a backslash that escapes
// nothing (at the end, before a line break), fails the whole parse. A backslash takes the next character
// into the text, so "\[" is text (and stays "\[" in the scheduled prompt).
//
// Which brackets form a group: a closing bracket's group can only start at the nearest unmatched opening
// bracket before it (anything else would leave an unmatched bracket inside). So one left-to-right pass
// with a stack of open brackets finds every candidate, checks each when it closes, and lets one that fails
// (or that a closing bracket of the other kind cuts off) be text, which leaves the brackets around it
// unable to be groups. Groups are recorded by position and nothing is copied: the parse takes linear time.

namespace kiln {

namespace {

enum class GroupKind { Emphasis, Edit, Alternation };

struct Group {
    GroupKind kind = GroupKind::Emphasis;
    size_t open = 0, close = 0;      // positions of the brackets
    std::vector<size_t> separators;  // positions of the ':' or '|' directly inside
    std::string number;              // Edit: the step or fraction as written
    double when = 0;                 // Edit: the last step of "from"
};

struct Parse {
    bool ok = true;                  // false: the grammar rejects the prompt
    std::vector<Group> groups;
    std::vector<int> group_at;       // by position of an opening bracket: index in groups, or -1
    int depth = 0;                   // deepest nesting of groups
};

// A bracket opened and not yet closed.
struct OpenBracket {
    size_t pos = 0;
    std::vector<size_t> separators;
    bool broken = false;  // holds a bracket that is text: can no longer be a group
    int depth = 0;        // deepest group inside
};

bool is_digit(char32_t c) { return c >= U'0' && c <= U'9'; }

// The number of an edit, "[WS] NUMBER [WS]" (lark's SIGNED_NUMBER: ASCII digits, optional '.', optional
// exponent); empty when the text is anything else.
std::string edit_number(const std::u32string& s, size_t from, size_t to) {
    size_t i = from;
    auto digits = [&] {
        const size_t start = i;
        while (i < to && is_digit(s[i])) ++i;
        return i - start;
    };
    while (i < to && python::is_space(s[i])) ++i;
    const size_t start = i;
    if (i < to && (s[i] == U'+' || s[i] == U'-')) ++i;
    const size_t integer = digits();
    size_t fraction = 0;
    if (i < to && s[i] == U'.') {
        ++i;
        fraction = digits();
    }
    if (integer == 0 && fraction == 0) return "";
    // An exponent only when complete: "1e" is the number 1 followed by text.
    const size_t before_exponent = i;
    if (i < to && (s[i] == U'e' || s[i] == U'E')) {
        ++i;
        if (i < to && (s[i] == U'+' || s[i] == U'-')) ++i;
        if (digits() == 0) i = before_exponent;
    }
    const size_t end = i;
    while (i < to && python::is_space(s[i])) ++i;
    if (i != to) return "";
    return unicode::encode_utf8(s.substr(start, end - start));
}

// The group a bracket closed at `close` makes, if its contents fit one of the forms.
bool make_group(const std::u32string& s, OpenBracket& bracket, size_t close, Group& group) {
    if (bracket.broken) return false;
    std::u32string seps;
    for (size_t p : bracket.separators) seps.push_back(s[p]);
    const bool round = s[bracket.pos] == U'(';
    const bool only_bars = !seps.empty() && seps.find_first_not_of(U'|') == std::u32string::npos;
    if (seps.empty() || (round && seps == U":")) {
        group.kind = GroupKind::Emphasis;
    } else if (!round && only_bars) {
        group.kind = GroupKind::Alternation;
    } else if (!round && (seps == U":" || seps == U"::")) {
        group.number = edit_number(s, bracket.separators.back() + 1, close);
        if (group.number.empty()) return false;
        group.kind = GroupKind::Edit;
    } else {
        return false;
    }
    group.open = bracket.pos;
    group.close = close;
    group.separators = std::move(bracket.separators);
    return true;
}

Parse parse(const std::u32string& s) {
    Parse result;
    result.group_at.assign(s.size(), -1);
    std::vector<OpenBracket> open;
    size_t i = 0;
    while (i < s.size()) {
        const char32_t c = s[i];
        if (c == U'\\') {
            // The grammar's text takes a backslash with the next character, which must not be a line break.
            if (i + 1 == s.size() || s[i + 1] == U'\n') {
                result.ok = false;
                return result;
            }
            i += 2;
            continue;
        }
        if (c == U'(' || c == U'[') {
            open.push_back(OpenBracket{i, {}, false, 0});
        } else if ((c == U':' || c == U'|') && !open.empty()) {
            open.back().separators.push_back(i);
        } else if (c == U')' || c == U']') {
            const char32_t opener = c == U')' ? U'(' : U'[';
            if (!open.empty() && s[open.back().pos] == opener) {
                OpenBracket bracket = std::move(open.back());
                open.pop_back();
                Group group;
                if (make_group(s, bracket, i, group)) {
                    const int depth = bracket.depth + 1;
                    result.depth = std::max(result.depth, depth);
                    if (!open.empty()) open.back().depth = std::max(open.back().depth, depth);
                    result.group_at[group.open] = static_cast<int>(result.groups.size());
                    result.groups.push_back(std::move(group));
                } else if (!open.empty()) {
                    open.back().broken = true;
                }
            } else {
                // Nothing open, or a bracket of the other kind: no bracket still open can close around this
                // one, so they all stay text.
                open.clear();
            }
        }
        ++i;
    }
    // What is left outside every group must be text: a '|' there has no place in the grammar.
    for (size_t p = 0; p < s.size();) {
        if (result.group_at[p] >= 0) {
            p = result.groups[static_cast<size_t>(result.group_at[p])].close + 1;
        } else if (s[p] == U'|') {
            result.ok = false;
            break;
        } else {
            p += s[p] == U'\\' ? 2 : 1;
        }
    }
    return result;
}

// Appends s[from, to) as the prompt reads at `step`.
void render(const std::u32string& s, const Parse& parse, size_t from, size_t to, int step, std::u32string& out) {
    for (size_t i = from; i < to;) {
        const int index = parse.group_at[i];
        if (index < 0) {
            const size_t n = s[i] == U'\\' ? 2 : 1;  // an escaped bracket is not a group's
            out.append(s, i, n);
            i += n;
            continue;
        }
        const Group& g = parse.groups[static_cast<size_t>(index)];
        // The parts between the brackets and separators: part k is [start(k), end(k)).
        auto start = [&](size_t k) { return k == 0 ? g.open + 1 : g.separators[k - 1] + 1; };
        auto end = [&](size_t k) { return k < g.separators.size() ? g.separators[k] : g.close; };
        switch (g.kind) {
            case GroupKind::Emphasis:
                for (size_t k = 0; k <= g.separators.size(); ++k) {
                    out.push_back(s[k == 0 ? g.open : g.separators[k - 1]]);
                    render(s, parse, start(k), end(k), step, out);
                }
                out.push_back(s[g.close]);
                break;
            case GroupKind::Edit: {
                // [to:N] has no "from"; in [from:to:N] "from" is part 0. The last part is N.
                const size_t to_part = g.separators.size() - 1;
                if (step > g.when) render(s, parse, start(to_part), end(to_part), step, out);
                else if (to_part == 1) render(s, parse, start(0), end(0), step, out);
                break;
            }
            case GroupKind::Alternation: {
                const size_t k = static_cast<size_t>(step - 1) % (g.separators.size() + 1);
                render(s, parse, start(k), end(k), step, out);
                break;
            }
        }
        i = g.close + 1;
    }
}

}  // namespace

std::vector<ScheduledPrompt> prompt_schedule(std::string_view prompt, int steps) {
    require(steps >= 1, ErrorKind::InvalidArgument, "prompt schedule: steps must be at least 1");
    const std::u32string text = unicode::decode_utf8(prompt);
    Parse parsed = parse(text);
    if (!parsed.ok) return {{steps, unicode::encode_utf8(text)}};
    require(parsed.depth <= kMaxPromptNesting, ErrorKind::InvalidArgument,
            "prompt: brackets nested deeper than " + std::to_string(kMaxPromptNesting) + " levels");

    // The steps at which the prompt changes: every edit's `when` from 1 up, every step if anything alternates.
    std::set<int> ends{steps};
    for (Group& g : parsed.groups) {
        if (g.kind == GroupKind::Alternation) {
            for (int t = 1; t <= steps; ++t) ends.insert(t);
        } else if (g.kind == GroupKind::Edit) {
            double v = *python::parse_float(g.number);  // edit_number made sure it is a number
            if (g.number.find('.') != std::string::npos) v *= steps;
            // Python's int() of an infinite float raises OverflowError.
            require(std::isfinite(v), ErrorKind::InvalidArgument,
                    "prompt: the editing step '" + g.number + "' is out of range");
            g.when = std::min<double>(steps, std::trunc(v));
            if (g.when >= 1) ends.insert(static_cast<int>(g.when));
        }
    }
    std::vector<ScheduledPrompt> schedule;
    for (int end : ends) {
        std::u32string out;
        render(text, parsed, 0, text.size(), end, out);
        schedule.push_back({end, unicode::encode_utf8(out)});
    }
    return schedule;
}

}  // namespace kiln
