// Element types a safetensors file can declare, spelled as in the file's JSON header, and the block
// formats of GGUF files (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 of 32 values: quant/block_formats.h; Q4_K, Q5_K,
// Q6_K of 256 values: quant/k_quants.h), which safetensors cannot declare.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q2_K, Q3_K };

const char* dtype_name(DType dtype);  // "F32", ... as spelled in safetensors headers; "Q8_0", ... as GGUF's
// Bytes per element; 0 for the block formats, whose elements have no whole size (see dtype_storage_bytes).
size_t dtype_size(DType dtype);

// Block formats: dtype_block_values values share a block of block_bytes bytes, and a tensor's numel is a
// multiple of the block.
bool is_block_quantized(DType dtype);
size_t dtype_block_bytes(DType dtype);  // 0 for element dtypes
int64_t dtype_block_values(DType dtype);  // values per block: 32, or 256 for the k-quants; 0 for element dtypes
// The bytes `numel` values of `dtype` take (numel whole blocks for block formats).
int64_t dtype_storage_bytes(DType dtype, int64_t numel);

// The dtype a safetensors header string names, or nothing for a string kiln does not know (the block
// formats are not safetensors dtypes and are never returned).
std::optional<DType> dtype_from_name(std::string_view name);

}  // namespace kiln
