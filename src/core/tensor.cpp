#include "core/tensor.h"

#include <algorithm>

#include "core/allocation_faults.h"
#include "core/dtype_convert.h"
#include "kiln/error.h"
#include "quant/block_formats.h"

namespace kiln {

std::string shape_str(const Shape& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

int64_t shape_numel(const Shape& shape) {
    int64_t n = 1;
    for (int64_t d : shape) {
        require(d >= 0, ErrorKind::InvalidArgument, "negative dimension in shape " + shape_str(shape));
        n *= d;
    }
    return n;
}

namespace {
// A host tensor's values about to be allocated: counted for KILN_FAIL_ALLOCATION_AT.
int64_t counted_host_values(int64_t numel) {
    count_allocation("cpu", numel * int64_t(sizeof(float)));
    return numel;
}
}  // namespace

Tensor::Tensor(Shape shape)
    : shape_(std::move(shape)),
      numel_(counted_host_values(shape_numel(shape_))),
      data_(numel_, 0.0f),
      lease_(int64_t(data_.size() * sizeof(float))) {}

Tensor::Tensor(Shape shape, std::vector<float> values)
    : shape_(std::move(shape)),
      numel_(static_cast<int64_t>(values.size())),
      data_(std::move(values)),
      lease_(int64_t(data_.size() * sizeof(float))) {
    require(shape_numel(shape_) == numel_, ErrorKind::InvalidArgument,
            "tensor of shape " + shape_str(shape_) + " given " + std::to_string(data_.size()) + " values");
}

Tensor Tensor::from_bits16(Shape shape, DType dtype, std::vector<uint16_t> bits) {
    require(dtype == DType::F16 || dtype == DType::BF16, ErrorKind::InvalidArgument,
            std::string("16-bit tensor of dtype ") + dtype_name(dtype) + " (F16 or BF16 expected)");
    require(shape_numel(shape) == static_cast<int64_t>(bits.size()), ErrorKind::InvalidArgument,
            "tensor of shape " + shape_str(shape) + " given " + std::to_string(bits.size()) + " values");
    Tensor t;
    t.shape_ = std::move(shape);
    t.numel_ = static_cast<int64_t>(bits.size());
    t.dtype_ = dtype;
    t.bits16_ = std::move(bits);
    t.lease_ = MemoryLease(int64_t(t.bits16_.size() * sizeof(uint16_t)));
    return t;
}

namespace {

// Block-format tensors hold rows of whole blocks, so that rows are byte ranges (weight tiles, row slices).
void require_block_rows(const Shape& shape, DType dtype) {
    const int64_t rows = shape.empty() ? 0 : shape[0], numel = shape_numel(shape);
    const int64_t block = dtype_block_values(dtype);
    require(!shape.empty() && (rows == 0 || (numel / rows) % block == 0), ErrorKind::InvalidArgument,
            std::string("a ") + dtype_name(dtype) + " tensor of shape " + shape_str(shape) +
                ": its rows (numel / dim 0) must be whole blocks of " + std::to_string(block) + " values");
}

}  // namespace

Tensor Tensor::from_blocks(Shape shape, DType dtype, std::vector<uint8_t> bytes) {
    require(is_block_quantized(dtype), ErrorKind::InvalidArgument,
            std::string("block tensor of dtype ") + dtype_name(dtype) + " (a block format expected)");
    require_block_rows(shape, dtype);
    const int64_t numel = shape_numel(shape);
    require(dtype_storage_bytes(dtype, numel) == int64_t(bytes.size()), ErrorKind::InvalidArgument,
            std::string(dtype_name(dtype)) + " tensor of shape " + shape_str(shape) + " given " +
                std::to_string(bytes.size()) + " bytes");
    Tensor t;
    t.shape_ = std::move(shape);
    t.numel_ = numel;
    t.dtype_ = dtype;
    t.blocks_ = std::move(bytes);
    t.lease_ = MemoryLease(int64_t(t.blocks_.size()));
    return t;
}

Tensor Tensor::view(Shape shape, DType dtype, std::shared_ptr<const void> storage, MemoryCategory category) {
    const bool blocks = is_block_quantized(dtype);
    require(dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16 || blocks, ErrorKind::InvalidArgument,
            std::string("a view of dtype ") + dtype_name(dtype) + " (F32, F16, BF16 or a block format expected)");
    if (blocks) require_block_rows(shape, dtype);
    Tensor t;
    t.numel_ = shape_numel(shape);
    require(storage != nullptr || t.numel_ == 0, ErrorKind::InvalidArgument,
            "a view of shape " + shape_str(shape) + " without memory");
    // Blocks are read byte by byte (quant/block_formats.h): any address will do.
    require(blocks || reinterpret_cast<uintptr_t>(storage.get()) % dtype_size(dtype) == 0, ErrorKind::InvalidArgument,
            std::string("a view of ") + dtype_name(dtype) + " values at an address not aligned for them");
    t.shape_ = std::move(shape);
    t.dtype_ = dtype;
    if (t.numel_ > 0) {  // an empty view needs no memory and holds none
        t.view_ = std::move(storage);
        t.lease_ = MemoryLease(dtype_storage_bytes(dtype, t.numel_), category);
    }
    return t;
}

// Copy-on-write: the first non-const access to a view's float32 values gives the tensor its own copy,
// counted in the current category, so writes never reach the memory it was a view of.
void Tensor::copy_out_of_view() {
    const float* values = f32();
    data_.assign(values, values + numel_);
    lease_ = MemoryLease(int64_t(data_.size() * sizeof(float)));
    view_.reset();
}

void Tensor::require_owned() const {
    require(!view_, ErrorKind::InvalidArgument,
            "tensor of shape " + shape_str(shape_) + " is a read-only view; read it through data()");
}

Tensor::Tensor(const Tensor& other)
    : shape_(other.shape_),
      numel_(other.numel_),
      dtype_(other.dtype_),
      data_(other.data_),
      bits16_(other.bits16_),
      blocks_(other.blocks_),
      // A lease's copy counts in the copier's category; a view's copy is the same kind of memory.
      lease_(other.view_ ? MemoryLease(other.lease_.bytes(), other.lease_.category()) : other.lease_),
      view_(other.view_) {
    if (other.device_) {
        device_ = std::make_shared<DeviceBuffer>(other.device_->backend(), other.device_->bytes());
        device_->backend().copy(device_->data(), other.device_->data(), other.device_->bytes());
    }
}

Tensor& Tensor::operator=(const Tensor& other) {
    if (this != &other) *this = Tensor(other);
    return *this;
}

Tensor Tensor::empty_on(Backend& backend, Shape shape, DType dtype) {
    // Block formats are stored as their blocks where the backend dequantizes them (supports()), rows of whole
    // blocks as on the host; elsewhere they reach the device dequantized (to_device's caller picks the dtype).
    if (is_block_quantized(dtype)) {
        require(backend.supports(dtype), ErrorKind::Unsupported,
                std::string("a ") + dtype_name(dtype) + " tensor on " + device_name(backend.device()) +
                    " (this device takes no " + dtype_name(dtype) + " blocks: upload the values in its precision)");
        require_block_rows(shape, dtype);
    }
    require(backend.supports(dtype), ErrorKind::Unsupported,
            device_name(backend.device()) + " does not compute in " + dtype_name(dtype) +
                (dtype == DType::BF16 ? " (use --precision fp16 or fp32)" : ""));
    Tensor t;
    t.numel_ = shape_numel(shape);
    t.shape_ = std::move(shape);
    t.dtype_ = dtype;
    t.device_ = std::make_shared<DeviceBuffer>(backend, dtype_storage_bytes(dtype, t.numel_));
    return t;
}

Tensor Tensor::on_buffer(std::shared_ptr<DeviceBuffer> buffer, Shape shape, DType dtype) {
    Tensor t;
    t.numel_ = shape_numel(shape);
    t.shape_ = std::move(shape);
    t.dtype_ = dtype;
    require(buffer && !is_block_quantized(dtype) && buffer->bytes() >= dtype_storage_bytes(dtype, t.numel_),
            ErrorKind::InvalidArgument,
            "Tensor::on_buffer: a " + std::string(dtype_name(dtype)) + " tensor of shape " + shape_str(t.shape_) +
                " does not fit a buffer of " + std::to_string(buffer ? buffer->bytes() : 0) + " bytes");
    t.device_ = std::move(buffer);
    return t;
}

Backend& Tensor::backend() const {
    require(device_ != nullptr, ErrorKind::InvalidArgument,
            "tensor of shape " + shape_str(shape_) + " is on the host, not on a device");
    return device_->backend();
}

void* Tensor::device_data() { return backend(), device_->data(); }
const void* Tensor::device_data() const { return backend(), device_->data(); }

Tensor Tensor::to_device(Backend& backend, DType dtype) const {
    Tensor out = empty_on(backend, shape_, dtype);
    if (numel_ == 0) return out;
    if (device_) {
        require(&device_->backend() == &backend, ErrorKind::Unsupported,
                "copies between two devices (" + device_name(device()) + " to " + device_name(backend.device()) + ")");
        // Blocks widen on the device (the products' transient weights: ops/device_weight.h); nothing quantizes there.
        require(!is_block_quantized(dtype) || dtype == dtype_, ErrorKind::Unsupported,
                std::string("quantizing a ") + dtype_name(dtype_) + " tensor to " + dtype_name(dtype) + " on " +
                    device_name(backend.device()) + " (quantize on the host)");
        // A dry run (core/dry_run.h) counts the copy and moves nothing: the source, a weight perhaps offloaded (a
        // block weight widened for a product), is not read. What the backend cannot convert fails as it would.
        if (!backend.allocations_are_real()) {
            require(backend.supports(dtype_) && backend.supports(dtype), ErrorKind::Unsupported,
                    std::string("converting ") + dtype_name(dtype_) + " to " + dtype_name(dtype) + " on " +
                        device_name(backend.device()) + " (the backend does not take both)");
            return out;
        }
        if (dtype == dtype_) {
            backend.copy(out.device_->data(), device_->data(), device_->bytes());
            return out;
        }
        backend.convert(device_->data(), dtype_, out.device_->data(), dtype, numel_);
        return out;
    }
    // Round on the host, then move the bytes: conversions are exact-to-nearest-even either way.
    if (is_block_quantized(dtype)) {  // the blocks as they are (quantized on the host first if need be)
        const Tensor c = converted(dtype);
        backend.upload(out.device_->data(), c.b8(), dtype_storage_bytes(dtype, numel_));
    } else if (dtype == DType::F32) {
        const Tensor f = to_f32();
        backend.upload(out.device_->data(), f.f32(), numel_ * 4);
    } else {
        const Tensor c = converted(dtype);
        backend.upload(out.device_->data(), c.b16(), numel_ * 2);
    }
    return out;
}

Tensor Tensor::to_host() const {
    if (!device_) return to_f32();
    Tensor out(shape_);
    if (numel_ == 0) return out;
    device_->backend().download_f32(out.data_.data(), device_->data(), dtype_, numel_);
    return out;
}

void Tensor::throw_not_host() const {
    fail(ErrorKind::InvalidArgument, "tensor of shape " + shape_str(shape_) + " is on " + device_name(device()) +
                                         "; copy it to the host first (to_host)");
}

void Tensor::throw_not_f32() const {
    if (device_) throw_not_host();
    // Reading blocks as floats would compute garbage: this op does not take block formats (yet).
    if (is_block_quantized(dtype_))
        fail(ErrorKind::Unsupported, std::string("a float32 tensor is needed here, got ") + dtype_name(dtype_) +
                                         " of shape " + shape_str(shape_) +
                                         " (only linear and conv2d read block-format weights)");
    fail(ErrorKind::InvalidArgument, std::string("a float32 tensor is needed here, got ") + dtype_name(dtype_) +
                                         " of shape " + shape_str(shape_));
}

const uint16_t* Tensor::bits16() const {
    require_host();
    require(dtype_ == DType::F16 || dtype_ == DType::BF16, ErrorKind::InvalidArgument,
            std::string("a 16-bit tensor is needed here, got ") + dtype_name(dtype_) + " of shape " + shape_str(shape_));
    return b16();
}

const uint8_t* Tensor::blocks() const {
    require_host();
    require(is_block_quantized(dtype_), ErrorKind::InvalidArgument,
            std::string("a block-format tensor is needed here, got ") + dtype_name(dtype_) + " of shape " +
                shape_str(shape_));
    return b8();
}

const uint8_t* Tensor::stored_bytes() const {
    if (dtype_ == DType::F32) return reinterpret_cast<const uint8_t*>(f32());
    if (is_block_quantized(dtype_)) return b8();
    return reinterpret_cast<const uint8_t*>(b16());
}

Tensor Tensor::to_f32() const {
    require_host();
    if (dtype_ == DType::F32) return *this;
    Tensor out(shape_);
    decode_to_float(dtype_, stored_bytes(), out.data_.data(), size_t(numel_));
    return out;
}

void Tensor::row_to_f32(int64_t row, float* out) const {
    require_host();
    require(rank() >= 1 && row >= 0 && row < shape_[0], ErrorKind::InvalidArgument,
            "row " + std::to_string(row) + " of a tensor of shape " + shape_str(shape_));
    const int64_t cols = numel_ / shape_[0];
    if (dtype_ == DType::F32) {
        std::copy(f32() + row * cols, f32() + (row + 1) * cols, out);
        return;
    }
    // Rows of a block format are whole blocks (from_blocks, view), so a row starts a block.
    decode_to_float(dtype_, stored_bytes() + dtype_storage_bytes(dtype_, row * cols), out, size_t(cols));
}

Tensor Tensor::converted(DType dtype) const {
    require_host();
    if (dtype == dtype_) return *this;
    if (dtype == DType::F32) return to_f32();
    const Tensor f = to_f32();
    if (is_block_quantized(dtype)) {
        require_block_rows(shape_, dtype);
        std::vector<uint8_t> bytes(size_t(dtype_storage_bytes(dtype, numel_)));
        quantize_values(dtype, f.f32(), bytes.data(), size_t(numel_));
        return from_blocks(shape_, dtype, std::move(bytes));
    }
    std::vector<uint16_t> bits(static_cast<size_t>(numel_));
    encode_from_float(dtype, f.f32(), reinterpret_cast<uint8_t*>(bits.data()), size_t(numel_));
    return from_bits16(shape_, dtype, std::move(bits));
}

Tensor Tensor::filled(Shape shape, float value) {
    Tensor t(std::move(shape));
    for (float& v : t.data_) v = value;
    return t;
}

Tensor Tensor::reshaped(Shape shape) const& { return Tensor(*this).reshaped(std::move(shape)); }
// The storage changes hands without a copy, so its count keeps its category (weights reshaped while
// loading stay weights).
Tensor Tensor::reshaped(Shape shape) && {
    require(shape_numel(shape) == numel_, ErrorKind::InvalidArgument,
            "tensor of shape " + shape_str(shape) + " given " + std::to_string(numel_) + " values");
    if (is_block_quantized(dtype_)) require_block_rows(shape, dtype_);
    Tensor out(std::move(*this));
    out.shape_ = std::move(shape);
    return out;
}

Tensor Tensor::first_values(Shape shape) && {
    const int64_t n = shape_numel(shape);
    require(n <= numel_, ErrorKind::InvalidArgument,
            "the first values of shape " + shape_str(shape) + " of a tensor of shape " + shape_str(shape_));
    if (is_block_quantized(dtype_)) require_block_rows(shape, dtype_);
    Tensor out(std::move(*this));
    out.shape_ = std::move(shape);
    out.numel_ = n;
    // Shrinking a vector never reallocates; the lease keeps counting the whole storage. A view keeps
    // pointing at the same memory.
    if (out.view_) return out;
    if (is_block_quantized(out.dtype_))
        out.blocks_.resize(size_t(dtype_storage_bytes(out.dtype_, n)));
    else if (out.dtype_ == DType::F32)
        out.data_.resize(static_cast<size_t>(n));
    else
        out.bits16_.resize(static_cast<size_t>(n));
    return out;
}

}  // namespace kiln
