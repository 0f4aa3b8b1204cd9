// Parsing and validation of a GGUF file's layout (versions 2 and 3, little-endian), as ggml's
// docs/gguf.md describes it:
//   "GGUF" magic, uint32 version, uint64 tensor count, uint64 metadata count,
//   metadata: key (uint64 length + bytes), uint32 value type, value (arrays: uint32 type, uint64 count, values),
//   tensor infos: name, uint32 n_dims, n_dims x uint64 dims (innermost first), uint32 ggml type,
//                 uint64 offset relative to the data section (a multiple of the alignment),
//   padding to `general.alignment` (uint32, default 32), then the data section.
// Shapes are reported in PyTorch's order (outermost first: GGUF's dims reversed), as safetensors has them.
// SafetensorsFile::open reads a GGUF file through this parser when it sees the magic (io/safetensors.h),
// so everything that loads a single-file checkpoint loads its GGUF conversion too.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "io/safetensors_header.h"  // TensorInfo

namespace kiln {

// One metadata value, kept for messages and the few keys a reader needs: scalars as text (and as a number
// where they are one), strings as they are, arrays as their element type and count.
struct GgufValue {
    uint32_t type = 0;          // GGUF's value type code (0 uint8 ... 12 float64)
    std::string text;           // scalars and strings; arrays: "[<count> x <type>]"
    uint64_t count = 1;         // elements, for arrays
    bool is_unsigned = false;   // an unsigned integer scalar (then `number` holds it)
    uint64_t number = 0;
};

struct GgufLayout {
    uint32_t version = 0;
    uint64_t alignment = 32;
    uint64_t data_offset = 0;  // from the start of the file
    std::map<std::string, GgufValue> metadata;
    std::map<std::string, TensorInfo> tensors;  // offsets from the start of the file
};

// True when the bytes start with GGUF's magic.
bool is_gguf(const uint8_t* file, uint64_t size);

// Validates the whole layout of the `size` bytes at `file` without reading tensor data: every string,
// count and value inside the file, tensor names unique, shapes that fit, offsets aligned, every tensor's
// bytes inside the file and no two overlapping. Malformed or truncated: InvalidModel naming `path`, the
// problem and, where it applies, the tensor or key. A tensor type kiln does not read (q2_K, q3_K, i-quants,
// q8_1, ternary, mxfp4, or a number ggml does not define): Unsupported naming the type. Big-endian files and GGUF v1:
// Unsupported.
GgufLayout parse_gguf_layout(const uint8_t* file, uint64_t size, const std::string& path);

// The name ggml gives a tensor type code ("Q4_K", ...), or "type N" for codes it does not define.
std::string ggml_type_name(uint32_t type);
// ggml's type code of a DType (the reader's table read backwards); Unsupported for one GGUF cannot hold.
uint32_t ggml_type_code(DType dtype);

}  // namespace kiln
