// Checks a JSON document against a field table of docs/BENCHMARKS.md, so that the documentation and
// the program cannot drift apart: every documented field must be present with its documented type,
// and every field present must be documented.
#pragma once
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::test {

// path ("suites[].memory.start_bytes") -> type ("integer", "number or null", "array of objects", ...)
using FieldTable = std::map<std::string, std::string>;

// The rows between <!-- schema:NAME:begin --> and <!-- schema:NAME:end --> of docs/BENCHMARKS.md.
inline FieldTable documented_fields(const std::string& name) {
    std::ifstream f(std::string(KILN_SOURCE_DIR) + "/docs/BENCHMARKS.md");
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string doc = ss.str();
    const std::string begin = "<!-- schema:" + name + ":begin -->", end = "<!-- schema:" + name + ":end -->";
    const size_t b = doc.find(begin), e = doc.find(end);
    FieldTable table;
    if (b == std::string::npos || e == std::string::npos || e < b) return table;
    std::istringstream section(doc.substr(b, e - b));
    const std::regex row(R"(^\| `([^`]+)` \| ([a-z ]+?) \|)");
    std::string line;
    std::smatch m;
    while (std::getline(section, line))
        if (std::regex_search(line, m, row)) table[m[1]] = m[2];
    return table;
}

namespace detail {

inline bool has_type(const nlohmann::json& v, const std::string& type) {
    if (type == "string") return v.is_string();
    if (type == "integer") return v.is_number_integer();
    if (type == "number") return v.is_number();
    if (type == "number or null") return v.is_number() || v.is_null();
    if (type == "boolean") return v.is_boolean();
    if (type == "object") return v.is_object();
    auto all = [&](auto pred) {
        if (!v.is_array()) return false;
        for (const auto& x : v)
            if (!pred(x)) return false;
        return true;
    };
    if (type == "array of objects") return all([](const nlohmann::json& x) { return x.is_object(); });
    if (type == "array of numbers") return all([](const nlohmann::json& x) { return x.is_number(); });
    if (type == "array of strings") return all([](const nlohmann::json& x) { return x.is_string(); });
    return false;  // a type the checker does not know is a documentation error
}

inline void walk(const nlohmann::json& v, const std::string& path, const FieldTable& table,
                 std::map<std::string, int>& seen, std::vector<std::string>& problems) {
    for (const auto& [key, child] : v.items()) {
        const std::string p = path.empty() ? key : path + "." + key;
        auto it = table.find(p);
        if (it == table.end()) {
            problems.push_back("undocumented field " + p);
            continue;
        }
        ++seen[p];
        if (!has_type(child, it->second)) {
            problems.push_back(p + " is " + child.dump().substr(0, 80) + ", documented as " + it->second);
            continue;
        }
        if (child.is_object()) walk(child, p, table, seen, problems);
        if (it->second == "array of objects")
            for (const auto& element : child) walk(element, p + "[]", table, seen, problems);
    }
}

// How many times `path` must appear: once, or once per element of its top-level array (the schemas
// have no deeper arrays of objects).
inline int expected_count(const nlohmann::json& doc, const std::string& path) {
    const size_t bracket = path.find("[]");
    if (bracket == std::string::npos) return 1;
    const std::string array = path.substr(0, bracket);
    return doc.contains(array) && doc[array].is_array() ? static_cast<int>(doc[array].size()) : 0;
}

}  // namespace detail

// Problems found; empty when the document matches the table.
inline std::vector<std::string> schema_problems(const nlohmann::json& doc, const FieldTable& table) {
    std::vector<std::string> problems;
    if (table.empty()) return {"no field table found in docs/BENCHMARKS.md"};
    if (!doc.is_object()) return {"the document is not a JSON object"};
    std::map<std::string, int> seen;
    detail::walk(doc, "", table, seen, problems);
    for (const auto& [path, type] : table) {
        const int want = detail::expected_count(doc, path);
        if (seen[path] != want)
            problems.push_back("documented field " + path + " present " + std::to_string(seen[path]) + " times, expected " +
                               std::to_string(want));
    }
    return problems;
}

}  // namespace kiln::test
