// Tensors of a safetensors file used where they lie: a Tensor::view into the file's read-only
// mapping instead of a copy. The view keeps the file mapped for as long as it lives, and its pages
// are read (from the page cache, or the disk) only when its values are; being clean file-backed
// pages, the kernel can drop them under memory pressure and read them again later.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "io/safetensors.h"

namespace kiln {

// The tensor `name` as the file stores it, without a copy, when it can be used in place: dtype F32,
// F16 or BF16 and data aligned for that dtype, or a block format (GGUF) whose rows are whole blocks (the format does not promise alignment; a file
// written by kiln or by the safetensors library has it). Nothing otherwise: the caller copies
// (SafetensorsFile::load / load_stored). A missing name is InvalidModel, as SafetensorsFile::info.
std::optional<Tensor> mapped_tensor(const std::shared_ptr<const SafetensorsFile>& file, const std::string& name);
// Rows [first, first + count) of the [rows, ...] tensor `name`, as mapped_tensor: a view of shape
// [count, ...] (rows are contiguous, so a slice of them is too). Out-of-range rows: InvalidArgument.
std::optional<Tensor> mapped_rows(const std::shared_ptr<const SafetensorsFile>& file, const std::string& name,
                                  int64_t first, int64_t count);

}  // namespace kiln
