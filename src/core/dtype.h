// Element types a safetensors file can declare, spelled as in the file's JSON header.
#pragma once
#include <cstddef>
#include <optional>
#include <string_view>

namespace kiln {

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

const char* dtype_name(DType dtype);  // "F32", ... as spelled in safetensors headers
size_t dtype_size(DType dtype);       // bytes per element

// The dtype a header string names, or nothing for a string kiln does not know.
std::optional<DType> dtype_from_name(std::string_view name);

}  // namespace kiln
