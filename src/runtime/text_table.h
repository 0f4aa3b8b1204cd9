// Plain-text tables for reports on a terminal: a header row, a rule, rows; the first column is
// left-aligned and the others right-aligned (they hold numbers).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

class TextTable {
public:
    explicit TextTable(std::vector<std::string> headers) : headers_(std::move(headers)) {}
    void add_row(std::vector<std::string> cells);  // missing cells are blank, extra ones are dropped
    std::string str() const;

private:
    std::vector<std::string> headers_;
    std::vector<std::vector<std::string>> rows_;
};

std::string fixed(double value, int decimals);  // "12.35"; "-" for NaN
std::string mebibytes(int64_t bytes);          // "1234.5" (MiB, one decimal)

}  // namespace kiln
