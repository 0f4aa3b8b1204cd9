#include "io/mapped_tensor.h"

#include <cstdint>

#include "kiln/error.h"

namespace kiln {

namespace {

// `shape`'s values starting `skip` values into the tensor, or nothing when they cannot be used in place.
std::optional<Tensor> view_of(const std::shared_ptr<const SafetensorsFile>& file, const TensorInfo& ti, Shape shape,
                              int64_t skip) {
    const bool blocks = is_block_quantized(ti.dtype);
    if (ti.dtype != DType::F32 && ti.dtype != DType::F16 && ti.dtype != DType::BF16 && !blocks) return std::nullopt;
    const int64_t numel = shape_numel(shape);
    if (numel == 0) return std::nullopt;  // nothing to share; a plain empty tensor does
    // Block formats: rows of whole blocks only (Tensor::view), so that `skip` (whole rows) is whole blocks.
    if (blocks && (shape.empty() || (numel / shape[0]) % dtype_block_values(ti.dtype) != 0)) return std::nullopt;
    const uint8_t* bytes = file->raw(ti.name) + dtype_storage_bytes(ti.dtype, skip);
    // Reading a float or a 16-bit code at an address not aligned for it is undefined behaviour (blocks are
    // read byte by byte).
    if (!blocks && reinterpret_cast<uintptr_t>(bytes) % dtype_size(ti.dtype) != 0) return std::nullopt;
    // The aliasing constructor: the view points at the values and shares ownership of the file.
    return Tensor::view(std::move(shape), ti.dtype, std::shared_ptr<const void>(file, bytes), MemoryCategory::MappedFile);
}

}  // namespace

std::optional<Tensor> mapped_tensor(const std::shared_ptr<const SafetensorsFile>& file, const std::string& name) {
    const TensorInfo& ti = file->info(name);
    return view_of(file, ti, ti.shape, 0);
}

std::optional<Tensor> mapped_rows(const std::shared_ptr<const SafetensorsFile>& file, const std::string& name,
                                  int64_t first, int64_t count) {
    const TensorInfo& ti = file->info(name);
    const int64_t rows = ti.shape.empty() ? 0 : ti.shape[0];
    require(first >= 0 && count >= 0 && first + count <= rows, ErrorKind::InvalidArgument,
            "rows [" + std::to_string(first) + ", " + std::to_string(first + count) + ") of tensor " +
                quote_name(name) + " of shape " + shape_str(ti.shape));
    const int64_t skip = rows ? first * (shape_numel(ti.shape) / rows) : 0;
    Shape shape = ti.shape;
    shape[0] = count;
    return view_of(file, ti, std::move(shape), skip);
}

}  // namespace kiln
