// Parsing and validation of a safetensors file's layout: 8-byte little-endian header length N,
// N bytes of JSON, then the data area that every tensor's data_offsets are relative to.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "core/tensor.h"
#include "core/dtype.h"

namespace kiln {

struct TensorInfo {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t offset;  // from the start of the file
    uint64_t nbytes;
};

struct SafetensorsLayout {
    std::map<std::string, TensorInfo> tensors;
    std::map<std::string, std::string> metadata;  // the "__metadata__" entries
};

// The largest header accepted; the same bound the reference implementation uses, so that a
// corrupt length field cannot make us parse hundreds of megabytes of garbage.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Validates the whole layout of the `size` bytes at `file` (every tensor's dtype, shape, byte range
// and the absence of overlaps) without reading any tensor data. Throws kiln::Error (InvalidModel)
// with a one-line message naming `path` and, where it applies, the tensor.
SafetensorsLayout parse_safetensors_layout(const uint8_t* file, uint64_t size, const std::string& path);

// InvalidModel naming `path` and two tensors when any two non-empty byte ranges share a byte.
void check_no_overlaps(const std::map<std::string, TensorInfo>& tensors, const std::string& path);

// Text made safe for a one-line error message: control characters escaped, cut after max_chars.
std::string one_line(std::string_view text, size_t max_chars);

// A tensor name made safe for a one-line error message: quoted, control characters escaped,
// very long names shortened.
std::string quote_name(std::string_view name);

}  // namespace kiln
