#include "runtime/text_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kiln {

void TextTable::add_row(std::vector<std::string> cells) {
    cells.resize(headers_.size());
    rows_.push_back(std::move(cells));
}

std::string TextTable::str() const {
    std::vector<size_t> width(headers_.size());
    for (size_t c = 0; c < headers_.size(); ++c) {
        width[c] = headers_[c].size();
        for (const auto& r : rows_) width[c] = std::max(width[c], r[c].size());
    }
    auto line = [&](const std::vector<std::string>& cells) {
        std::string s;
        for (size_t c = 0; c < cells.size(); ++c) {
            const std::string pad(width[c] - cells[c].size(), ' ');
            if (c) s += "  ";
            s += c == 0 ? cells[c] + pad : pad + cells[c];
        }
        while (!s.empty() && s.back() == ' ') s.pop_back();
        return s + "\n";
    };
    std::string out = line(headers_);
    size_t total = 0;
    for (size_t c = 0; c < width.size(); ++c) total += width[c] + (c ? 2 : 0);
    out += std::string(total, '-') + "\n";
    for (const auto& r : rows_) out += line(r);
    return out;
}

std::string fixed(double value, int decimals) {
    if (std::isnan(value)) return "-";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
    return buf;
}

std::string mebibytes(int64_t bytes) { return fixed(static_cast<double>(bytes) / (1024.0 * 1024.0), 1); }

}  // namespace kiln
