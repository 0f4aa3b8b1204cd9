#include "models/weight_source.h"

#include "io/mapped_tensor.h"
#include "models/quant_policy.h"
#include "kiln/error.h"

namespace kiln {

namespace {

// Weights are floating-point numbers. A tensor the file declares as integers (or booleans) where kiln
// reads a weight is not a model to convert by value: it is a damaged or mislabelled header, and its
// bytes read as integers would run as garbage weights.
void require_floating(const SafetensorsFile& file, const std::string& name) {
    const DType t = file.info(name).dtype;
    require(t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64 || is_block_quantized(t),
            ErrorKind::InvalidModel,
            "tensor " + quote_name(name) + " in " + file.path() + " has dtype " + dtype_name(t) +
                "; kiln reads weights of F32, F16, BF16, F64 or a GGUF block format (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K ... Q6_K)");
}

}  // namespace

FileSource::FileSource(std::shared_ptr<const SafetensorsFile> file) : file_(std::move(file)) {}
bool FileSource::has(const std::string& name) const { return file_->has(name); }
Tensor FileSource::load(const std::string& name) const {
    require(file_->has(name), ErrorKind::InvalidModel, "missing tensor '" + name + "' in " + file_->path());
    require_floating(*file_, name);
    return file_->load(name);
}
Tensor FileSource::load_matrix(const std::string& name, const Shape*) const { return matrix(name, true); }
Tensor FileSource::load_matrix_copied(const std::string& name, const Shape*) const { return matrix(name, false); }
Tensor FileSource::matrix(const std::string& name, bool in_place) const {
    require(file_->has(name), ErrorKind::InvalidModel, "missing tensor '" + name + "' in " + file_->path());
    require_floating(*file_, name);
    if (in_place && keeps_stored_on_host(file_->info(name).dtype))
        if (std::optional<Tensor> in_place = mapped_tensor(file_, name)) return std::move(*in_place);
    return file_->load_stored(name);
}
std::vector<std::string> FileSource::names() const { return file_->names(); }
std::string FileSource::describe() const { return file_->path(); }

MappedSource::MappedSource(std::shared_ptr<const SafetensorsFile> file, std::map<std::string, WeightMapping> table,
                           std::string component, std::function<std::string(const std::string&)> file_name_for)
    : file_(std::move(file)),
      table_(std::move(table)),
      component_(std::move(component)),
      file_name_for_(std::move(file_name_for)) {}

bool MappedSource::has(const std::string& name) const { return table_.count(name) > 0; }

std::vector<std::string> MappedSource::names() const {
    std::vector<std::string> out;
    for (const auto& [name, m] : table_) out.push_back(name);
    return out;
}

std::string MappedSource::display_name(const std::string& name) const {
    auto it = table_.find(name);
    const std::string in_file = it != table_.end() ? it->second.file_name : file_name_for_ ? file_name_for_(name) : "";
    if (in_file.empty()) return component_ + " tensor '" + name + "'";
    return "'" + in_file + "' (" + component_ + " " + name + ")";
}

std::string MappedSource::describe() const { return file_->path() + " (" + component_ + ")"; }

Tensor MappedSource::load(const std::string& name) const { return load_mapped(name, false, false); }
Tensor MappedSource::load_matrix(const std::string& name, const Shape*) const {
    return load_mapped(name, true, true);
}
Tensor MappedSource::load_matrix_copied(const std::string& name, const Shape*) const {
    return load_mapped(name, true, false);
}

namespace {

// The rows of one of m.parts parts of a fused tensor of this shape.
int64_t rows_per_part(const Shape& shape, const WeightMapping& m, const SafetensorsFile& file) {
    // Rank and emptiness first: dim(0) of a scalar, or numel / 0 rows, would not be an answer.
    const int64_t rows = !shape.empty() ? shape[0] : 0;
    require(rows > 0 && rows % m.parts == 0, ErrorKind::InvalidModel,
            "fused tensor '" + m.file_name + "' in " + file.path() + " of shape " + shape_str(shape) +
                " does not split into " + std::to_string(m.parts) + " parts");
    return rows / m.parts;
}

Shape squeezed(const Shape& shape) {
    Shape s;
    for (int64_t d : shape)
        if (d != 1) s.push_back(d);
    return s;
}

// Rows [first, first + n) of t (any dtype), as a tensor of shape `shape`.
Tensor slice_rows(const Tensor& t, int64_t first, int64_t n, Shape shape) {
    const int64_t inner = t.numel() / t.dim(0);
    if (is_block_quantized(t.dtype())) {  // rows are whole blocks (Tensor::from_blocks)
        const uint8_t* p = t.blocks();
        return Tensor::from_blocks(std::move(shape), t.dtype(),
                                   std::vector<uint8_t>(p + dtype_storage_bytes(t.dtype(), first * inner),
                                                        p + dtype_storage_bytes(t.dtype(), (first + n) * inner)));
    }
    if (t.dtype() == DType::F32)
        return Tensor(std::move(shape), std::vector<float>(t.data() + first * inner, t.data() + (first + n) * inner));
    return Tensor::from_bits16(std::move(shape), t.dtype(),
                               std::vector<uint16_t>(t.bits16() + first * inner, t.bits16() + (first + n) * inner));
}

}  // namespace

// The mapped tensor as a view of the file, for the mappings that only choose bytes and shape.
std::optional<Tensor> MappedSource::view(const WeightMapping& m) const {
    switch (m.op) {
        case WeightMapping::Op::Copy: return mapped_tensor(file_, m.file_name);
        case WeightMapping::Op::Squeeze: {
            std::optional<Tensor> t = mapped_tensor(file_, m.file_name);
            if (t) *t = std::move(*t).reshaped(squeezed(t->shape()));
            return t;
        }
        case WeightMapping::Op::RowSlice: {
            const int64_t n = rows_per_part(file_->info(m.file_name).shape, m, *file_);
            return mapped_rows(file_, m.file_name, m.part * n, n);
        }
        case WeightMapping::Op::Transpose: return std::nullopt;  // moves values
    }
    return std::nullopt;
}

Tensor MappedSource::load_mapped(const std::string& name, bool stored_precision, bool in_place) const {
    auto it = table_.find(name);
    require(it != table_.end(), ErrorKind::InvalidModel,
            "missing tensor for " + component_ + " '" + name + "' in " + file_->path());
    const WeightMapping& m = it->second;
    require_floating(*file_, m.file_name);
    if (in_place && stored_precision && keeps_stored_on_host(file_->info(m.file_name).dtype))
        if (std::optional<Tensor> in_place = view(m)) return std::move(*in_place);
    // A transposed tensor (SDXL's small text projection) is transposed in float32.
    Tensor t = stored_precision && m.op != WeightMapping::Op::Transpose ? file_->load_stored(m.file_name)
                                                                         : file_->load(m.file_name);
    switch (m.op) {
        case WeightMapping::Op::Copy: return t;
        case WeightMapping::Op::Squeeze: return std::move(t).reshaped(squeezed(t.shape()));
        case WeightMapping::Op::Transpose: {
            require(t.rank() == 2, ErrorKind::InvalidModel, "tensor '" + m.file_name + "' in " + file_->path() +
                                                                " should be 2-d, has shape " + shape_str(t.shape()));
            const int64_t r = t.dim(0), c = t.dim(1);
            Tensor out({c, r});
            for (int64_t i = 0; i < r; ++i)
                for (int64_t j = 0; j < c; ++j) out[j * r + i] = t[i * c + j];
            return out;
        }
        case WeightMapping::Op::RowSlice: {
            const int64_t n = rows_per_part(t.shape(), m, *file_);
            Shape s = t.shape();
            s[0] = n;
            return slice_rows(t, m.part * n, n, std::move(s));
        }
    }
    return t;
}

Tensor WeightReader::read(const std::string& name, const Shape* expected, bool matrix, bool copied) {
    require(source_.has(name), ErrorKind::InvalidModel,
            "missing tensor " + source_.display_name(name) + " in " + source_.describe());
    used_.insert(name);
    Tensor t = matrix ? (copied ? source_.load_matrix_copied(name, expected) : source_.load_matrix(name, expected))
                      : expected ? source_.load_expecting(name, *expected) : source_.load(name);
    parameters_ += t.numel();
    if (t.is_view() && source_.views_are_file_pages()) {
        const Tensor& v = t;
        const void* bytes = v.dtype() == DType::F32          ? static_cast<const void*>(v.data())
                            : is_block_quantized(v.dtype()) ? static_cast<const void*>(v.blocks())
                                                             : static_cast<const void*>(v.bits16());
        pages_.add(name, bytes, dtype_storage_bytes(v.dtype(), v.numel()));
    }
    if (expected && t.shape() != *expected)
        fail(ErrorKind::InvalidModel, "tensor " + source_.display_name(name) + " in " + source_.describe() +
                                          " has shape " + shape_str(t.shape()) + ", expected " + shape_str(*expected));
    if (!matrix || !source_.weights_dtype) return t;
    const DType want = *source_.weights_dtype;
    if (!is_block_quantized(want)) return t.converted(want);
    const std::optional<DType> to = quantized_dtype(name, t.shape(), want);
    if (!to || t.dtype() == *to) return t;
    try {
        return t.converted(*to);
    } catch (const Error& e) {  // a NaN or infinite weight: the file is damaged
        fail(ErrorKind::InvalidModel, "tensor " + source_.display_name(name) + " in " + source_.describe() + ": " +
                                          e.what());
    }
}

Tensor WeightReader::place(Tensor t, std::vector<std::string> names) {
    if (!source_.device) return t;
    // Blocks stay blocks where the backend takes the format (dequantized beside each product, ops/device_weight.h).
    const bool blocks = is_block_quantized(t.dtype()) && source_.device->supports(t.dtype());
    Tensor placed = t.to_device(*source_.device, blocks ? t.dtype() : source_.device_dtype);  // t's copy goes with t
    device_weights_.add(std::move(names), placed.device_buffer());
    if (source_.offload_weights && placed.device_buffer()) placed.device_buffer()->offload();
    return placed;
}

Tensor WeightReader::get(const std::string& name, const Shape& expected) {
    return place(read(name, &expected, false), {name});
}
Tensor WeightReader::get(const std::string& name) { return place(read(name, nullptr, false), {name}); }
Tensor WeightReader::get_matrix(const std::string& name, const Shape& expected) {
    return place(read(name, &expected, true), {name});
}
Tensor WeightReader::get_matrix(const std::string& name) { return place(read(name, nullptr, true), {name}); }
Tensor WeightReader::get_matrix_stack(const std::vector<std::string>& names, const Shape& each) {
    require(each.size() == 2, ErrorKind::InvalidArgument, "get_matrix_stack: needs a 2D shape");
    return stack(names, each, true);
}

Tensor WeightReader::get_vector_stack(const std::vector<std::string>& names, int64_t each) {
    return stack(names, {each}, false);
}

Tensor WeightReader::stack(const std::vector<std::string>& names, const Shape& each, bool matrix) {
    require(!names.empty(), ErrorKind::InvalidArgument, "WeightReader: a stack needs one or more names");
    std::vector<Tensor> parts;
    for (const std::string& n : names) parts.push_back(read(n, &each, matrix, /*copied=*/true));
    DType type = parts.front().dtype();
    // Parts of different precisions (a GGUF file that quantized some, a --weights policy that kept some)
    // are stacked as float32: exact for 16-bit parts and for the values blocks decode to.
    for (const Tensor& p : parts)
        if (p.dtype() != type) type = DType::F32;
    if (type == DType::F32)
        for (Tensor& p : parts) p = p.to_f32();
    Shape shape = each;
    shape[0] *= int64_t(parts.size());
    const int64_t n = parts.front().numel();
    if (type == DType::F32) {
        std::vector<float> all;
        all.reserve(size_t(n) * parts.size());
        for (const Tensor& p : parts) all.insert(all.end(), p.data(), p.data() + n);  // a source may give views
        return place(Tensor(shape, std::move(all)), names);
    }
    if (is_block_quantized(type)) {  // each part is rows of whole blocks, so the stack is too
        std::vector<uint8_t> all;
        const int64_t bytes = dtype_storage_bytes(type, n);
        all.reserve(size_t(bytes) * parts.size());
        for (const Tensor& p : parts) all.insert(all.end(), p.blocks(), p.blocks() + bytes);
        return place(Tensor::from_blocks(shape, type, std::move(all)), names);
    }
    std::vector<uint16_t> all;
    all.reserve(size_t(n) * parts.size());
    for (const Tensor& p : parts) all.insert(all.end(), p.bits16(), p.bits16() + n);
    return place(Tensor::from_bits16(shape, type, std::move(all)), names);
}

Tensor WeightReader::get_host(const std::string& name, const Shape& expected) { return read(name, &expected, false); }
Tensor WeightReader::get_matrix_host(const std::string& name, const Shape& expected) {
    return read(name, &expected, true);
}

void WeightReader::check_all_used(const std::function<bool(const std::string&)>& ignore) const {
    std::vector<std::string> extra;
    for (const std::string& n : source_.names())
        if (!used_.count(n) && !(ignore && ignore(n))) extra.push_back(n);
    if (extra.empty()) return;
    std::string list;
    for (size_t i = 0; i < extra.size() && i < 8; ++i) list += (i ? ", " : "") + extra[i];
    if (extra.size() > 8) list += ", ... (" + std::to_string(extra.size()) + " in all)";
    fail(ErrorKind::InvalidModel, "unexpected tensors in " + source_.describe() + ": " + list);
}

}  // namespace kiln
