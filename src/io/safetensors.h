// Reading and writing safetensors files: an 8-byte little-endian header length N, N bytes of JSON
// describing every tensor (dtype, shape, byte range), then the raw little-endian tensor data.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "core/dtype.h"
#include "io/mapped_file.h"
#include "io/safetensors_header.h"  // TensorInfo

namespace kiln {

// An open safetensors file, memory-mapped read-only. Everything about its layout was validated by
// open(), so load() and raw() never read outside the file. Movable, not copyable.
// open() also reads GGUF files (io/gguf.h), recognised by their magic: their tensors are byte ranges
// of the mapping too, with PyTorch-order shapes and the same names as the checkpoint they were
// converted from, so every loader of single files reads them unchanged. Their blocks (Q8_0 ... Q6_K)
// decode to float32 in load(); load_stored() keeps them as blocks. PyTorch checkpoints (.ckpt/.pt, zip or
// legacy format: io/torch_checkpoint.h) are recognised by their magic too; their tensors are byte ranges of
// the mapping as well (storages shared between tensors overlap, which only they may). (The class keeps its name for now;
// "TensorFile" would describe it better.)
class SafetensorsFile {
public:
    static SafetensorsFile open(const std::string& path);  // throws kiln::Error (IO or InvalidModel)

    const std::string& path() const { return path_; }
    uint64_t file_size() const { return file_.size(); }
    std::vector<std::string> names() const;  // sorted
    bool has(const std::string& name) const { return layout_.tensors.count(name) != 0; }
    const TensorInfo& info(const std::string& name) const;  // missing -> InvalidModel naming tensor and file
    // The tensor as float32, converted from F64/F32/F16/BF16 or by value from integer dtypes;
    // BOOL gives an Unsupported error.
    Tensor load(const std::string& name) const;
    // The tensor in its stored precision when that is F16 or BF16 (16-bit codes) or a block format whose
    // rows are whole blocks (Tensor::from_blocks), else as load().
    Tensor load_stored(const std::string& name) const;
    const uint8_t* raw(const std::string& name) const;  // pointer into the mapping, info(name).nbytes long
    // safetensors' "__metadata__", or a GGUF file's metadata values as text.
    const std::map<std::string, std::string>& metadata() const { return layout_.metadata; }
    bool is_gguf() const { return gguf_; }
    bool is_torch_checkpoint() const { return torch_; }

    SafetensorsFile(SafetensorsFile&&) noexcept = default;
    SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

private:
    SafetensorsFile() = default;

    std::string path_;
    MappedFile file_;
    SafetensorsLayout layout_;
    bool gguf_ = false;
    bool torch_ = false;
};

// Writes the tensors (in the given order) converted to `dtype` (F32, F16 or BF16) with the given
// "__metadata__" entries. The file is written beside `path` under a temporary name and renamed over
// it at the end, so readers never see half a file and a file still mapped elsewhere is not changed.
// The header is padded with spaces so that the data area starts at a multiple of 8 bytes.
// Throws kiln::Error: InvalidArgument for empty, duplicate or reserved names, Unsupported for
// another dtype, IO when the file cannot be written.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       DType dtype = DType::F32, const std::map<std::string, std::string>& metadata = {});

}  // namespace kiln
