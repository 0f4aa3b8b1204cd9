// Python's float() of the number texts AUTOMATIC1111's prompt syntax reads: an optional sign, decimal
// digits with at most one '.', and an optional exponent. Correctly rounded, as Python's is, so that the
// same text gives the same double in both.
#pragma once
#include <optional>
#include <string_view>

namespace kiln::python {

// `text` in ASCII (map other scripts' digits first). Overflow gives +-infinity and underflow +-0, as in
// Python; text that is not a number (no digit, two dots, ...) gives nothing, where Python raises
// ValueError.
std::optional<double> parse_float(std::string_view text);

}  // namespace kiln::python
