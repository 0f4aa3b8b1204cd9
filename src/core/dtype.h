// Element types a safetensors file can declare, spelled as in the file's JSON header, and the 32-value
// block formats of GGUF files (Q8_0, Q4_0, Q4_1: quant/block_formats.h), which safetensors cannot declare.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, Q8_0, Q4_0, Q4_1 };

const char* dtype_name(DType dtype);  // "F32", ... as spelled in safetensors headers; "Q8_0", ... as GGUF's
// Bytes per element; 0 for the block formats, whose elements have no whole size (see dtype_storage_bytes).
size_t dtype_size(DType dtype);

// Block formats: 32 values share a block of block_bytes bytes, and a tensor's numel is a multiple of 32.
bool is_block_quantized(DType dtype);
size_t dtype_block_bytes(DType dtype);  // 0 for element dtypes
// The bytes `numel` values of `dtype` take (numel a multiple of 32 for block formats).
int64_t dtype_storage_bytes(DType dtype, int64_t numel);

// The dtype a safetensors header string names, or nothing for a string kiln does not know (the block
// formats are not safetensors dtypes and are never returned).
std::optional<DType> dtype_from_name(std::string_view name);

}  // namespace kiln
