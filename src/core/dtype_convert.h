// Element conversions between the dtypes of a safetensors file and float32.
// Sources and destinations of raw bytes may have any alignment (a file's data area starts at
// 8 + header length, which need not be a multiple of anything) and are little-endian.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace kiln {

// Decodes n elements of `dtype` at src into dst. Integers convert by value (large I64/I32 values
// round to the nearest float); F64 outside float's range becomes +-inf as IEEE rounding would.
// Block formats (Q8_0, ..., Q6_K) are dequantized; n must be whole blocks and src start a block.
// BOOL is not a number here: callers reject it first.
void decode_to_float(DType dtype, const uint8_t* src, float* dst, size_t n);

// Encodes n floats as F32, F16 or BF16 (round to nearest even) into dst (n * dtype_size bytes).
void encode_from_float(DType dtype, const float* src, uint8_t* dst, size_t n);

// Quantizes n floats (whole blocks) into blocks of `dtype` (a block format) at dst, with ggml's
// rounding rules (quant/block_formats.h). A NaN or infinite value, or a block whose scale would overflow
// fp16, is InvalidArgument naming the value's index.
void quantize_values(DType dtype, const float* src, uint8_t* dst, size_t n);

// float -> bfloat16, round to nearest even; NaN stays a (quiet) NaN of the same sign.
uint16_t float_to_bf16(float f);

}  // namespace kiln
