// Writing GGUF files (version 3, little-endian, alignment 32: the layout io/gguf.h reads), tensors under the
// names given and string metadata (stable-diffusion.cpp's converter writes none).
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace kiln {

struct GgufWriteSpec {
    std::string name;
    Shape shape;  // PyTorch order; written innermost first
    DType dtype;  // not U8/BOOL; a block format needs an innermost dimension of whole blocks (ggml's rule)
};

// `produce(i, write)` hands over tensor i's bytes (dtype_storage_bytes), in one or more calls to write, one
// tensor at a time (a model larger than memory streams through). The file is written under a temporary name
// beside `path` and renamed over it at the end. InvalidArgument for empty or repeated names, specs GGUF cannot
// hold, or a producer handing over the wrong byte count; IO errors name the file.
using GgufBytes = std::function<void(const void* data, uint64_t size)>;
void write_gguf(const std::string& path, const std::vector<GgufWriteSpec>& tensors,
                const std::function<void(size_t index, const GgufBytes& write)>& produce,
                const std::map<std::string, std::string>& metadata = {},
                const std::function<void(size_t done, size_t total)>& progress = nullptr);

}  // namespace kiln
