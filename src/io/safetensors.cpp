#include "io/safetensors.h"

#include <cstring>

#include <new>

#include "core/dtype_convert.h"
#include "io/gguf.h"
#include "io/torch_checkpoint.h"
#include "io/zip_archive.h"
#include "kiln/error.h"

namespace kiln {

SafetensorsFile SafetensorsFile::open(const std::string& path) {
    SafetensorsFile file;
    file.path_ = path;
    file.file_ = MappedFile::open(path);
    if (kiln::is_gguf(file.file_.data(), file.file_.size())) {
        GgufLayout gguf = parse_gguf_layout(file.file_.data(), file.file_.size(), path);
        file.gguf_ = true;
        file.layout_.tensors = std::move(gguf.tensors);
        for (auto& [key, value] : gguf.metadata) file.layout_.metadata.emplace(key, std::move(value.text));
        return file;
    }
    if (is_zip(file.file_.data(), file.file_.size()) ||
        is_legacy_torch_checkpoint(file.file_.data(), file.file_.size())) {
        file.layout_ = parse_torch_checkpoint_layout(file.file_.data(), file.file_.size(), path);
        file.torch_ = true;
        return file;
    }
    file.layout_ = parse_safetensors_layout(file.file_.data(), file.file_.size(), path);
    return file;
}

std::vector<std::string> SafetensorsFile::names() const {
    std::vector<std::string> out;
    out.reserve(layout_.tensors.size());
    for (const auto& entry : layout_.tensors) out.push_back(entry.first);  // std::map iterates sorted
    return out;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
    auto it = layout_.tensors.find(name);
    if (it == layout_.tensors.end())
        fail(ErrorKind::InvalidModel, path_ + ": no tensor named " + quote_name(name));
    return it->second;
}

const uint8_t* SafetensorsFile::raw(const std::string& name) const { return file_.data() + info(name).offset; }

Tensor SafetensorsFile::load(const std::string& name) const {
    const TensorInfo& ti = info(name);
    require(ti.dtype != DType::BOOL, ErrorKind::Unsupported,
            path_ + ": tensor " + quote_name(name) + " is BOOL, which kiln does not load as numbers");
    Tensor t;
    try {
        t = Tensor(ti.shape);
    } catch (const std::bad_alloc&) {
        fail(ErrorKind::OutOfMemory,
             path_ + ": no memory for tensor " + quote_name(name) + " of shape " + shape_str(ti.shape));
    }
    decode_to_float(ti.dtype, file_.data() + ti.offset, t.data(), static_cast<size_t>(t.numel()));
    file_.drop_pages(ti.offset, ti.nbytes);  // the copy is what stays resident, not the file's pages too
    return t;
}

namespace {

bool whole_block_rows(const Shape& shape, DType dtype) {
    const int64_t rows = shape.empty() ? 0 : shape[0];
    return rows > 0 && (shape_numel(shape) / rows) % dtype_block_values(dtype) == 0;
}

}  // namespace

Tensor SafetensorsFile::load_stored(const std::string& name) const {
    const TensorInfo& ti = info(name);
    if (is_block_quantized(ti.dtype) && whole_block_rows(ti.shape, ti.dtype)) {
        std::vector<uint8_t> bytes;
        try {
            bytes.assign(file_.data() + ti.offset, file_.data() + ti.offset + ti.nbytes);
        } catch (const std::bad_alloc&) {
            fail(ErrorKind::OutOfMemory,
                 path_ + ": no memory for tensor " + quote_name(name) + " of shape " + shape_str(ti.shape));
        }
        file_.drop_pages(ti.offset, ti.nbytes);
        return Tensor::from_blocks(ti.shape, ti.dtype, std::move(bytes));
    }
    if (ti.dtype != DType::F16 && ti.dtype != DType::BF16) return load(name);
    std::vector<uint16_t> bits;
    try {
        bits.resize(static_cast<size_t>(shape_numel(ti.shape)));
    } catch (const std::bad_alloc&) {
        fail(ErrorKind::OutOfMemory,
             path_ + ": no memory for tensor " + quote_name(name) + " of shape " + shape_str(ti.shape));
    }
    if (!bits.empty()) std::memcpy(bits.data(), file_.data() + ti.offset, bits.size() * sizeof(uint16_t));
    file_.drop_pages(ti.offset, ti.nbytes);
    return Tensor::from_bits16(ti.shape, ti.dtype, std::move(bits));
}

}  // namespace kiln
