// A dense tensor on the host in PyTorch's dimension order (row-major, N,C,H,W): float32 values, or the
// 16-bit codes of F16/BF16 weights kept in the precision their file stores them in (half the memory;
// the ops that take weights, linear and conv2d, convert tiles of them to float32 as they go).
// Float32 is the currency between models, samplers and the CPU backend: data() refuses other dtypes.
// A tensor may instead live on a GPU (device() is not the CPU): then its storage is a DeviceBuffer of its
// backend (core/backend.h) in any of the three dtypes, the host accessors refuse it, and a copy of the tensor
// is a copy on the device. to_host() and to_device() move values across.
// Its storage counts itself in the memory accounting (core/memory.h): numel * element size on "cpu", in the
// category current on the creating thread (Activations unless a MemoryCategoryScope says otherwise).
// A copy counts in the copier's category, a move keeps the count's category. Growing values() in place
// is not re-counted: make a new tensor instead.
// A weight may also be held in a block format (Q8_0, Q4_0, ...: quant/block_formats.h, quant/k_quants.h) as
// the bytes of its blocks: every row (numel / dim(0) values) is whole blocks, so a range of rows is a range of
// bytes. On the host linear and conv2d dequantize tiles of such rows as they go, exactly as they convert F16/BF16
// tiles; any other use of the values reads them through to_f32(), and the float32 accessors refuse such a tensor
// with an Unsupported error rather than read its bytes as floats. On a device whose backend supports() the
// format the blocks are kept as they are, and widened by to_device(backend, F16 / F32 / BF16) there (the
// products do it: ops/device_weight.h); nothing quantizes on a device.
// A view (Tensor::view) reads values that live in memory it does not own, a weight inside a memory-mapped
// file: nothing is copied, its bytes count in the category its maker names, and nothing can write
// through it (see view()).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/memory.h"

namespace kiln {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& shape);
int64_t shape_numel(const Shape& shape);

class Tensor {
public:
    Tensor() = default;
    explicit Tensor(Shape shape);                     // zero-filled
    Tensor(Shape shape, std::vector<float> values);   // takes the values; sizes must agree
    static Tensor filled(Shape shape, float value);
    Tensor(const Tensor& other);
    Tensor& operator=(const Tensor& other);
    // A moved-from tensor is empty (numel 0), as a moved-from vector is.
    Tensor(Tensor&& other) noexcept { *this = std::move(other); }
    Tensor& operator=(Tensor&& other) noexcept {
        shape_ = std::move(other.shape_);
        numel_ = std::exchange(other.numel_, 0);
        dtype_ = std::exchange(other.dtype_, DType::F32);
        data_ = std::move(other.data_);
        bits16_ = std::move(other.bits16_);
        blocks_ = std::move(other.blocks_);
        lease_ = std::move(other.lease_);
        view_ = std::move(other.view_);
        device_ = std::move(other.device_);
        other.shape_.clear();
        return *this;
    }
    // F16 or BF16 codes, numel of them (anything else: InvalidArgument).
    static Tensor from_bits16(Shape shape, DType dtype, std::vector<uint16_t> bits);
    // The blocks of a block-format tensor (Q8_0, Q4_0, ..., Q6_K): rows of whole blocks (rank >= 1,
    // numel / dim(0) a multiple of dtype_block_values) and dtype_storage_bytes(dtype, numel) bytes; else InvalidArgument.
    static Tensor from_blocks(Shape shape, DType dtype, std::vector<uint8_t> bytes);
    // Read-only values of `dtype` (F32, F16, BF16, or a block format) that `storage` points at, numel(shape)
    // of them and aligned for the dtype (blocks need no alignment), kept alive by `storage`'s owner (a
    // shared_ptr made with the aliasing constructor: a weight inside a mapped file keeps the mapping).
    // Nothing is copied; the bytes count in `category` (MappedFile for a file's pages) rather than as
    // memory kiln allocated. Const reads go to that memory; the non-const float32 accessors (data(),
    // operator[], values()) first copy the values into storage of the tensor's own, so no code can write
    // through a view. A copy of a view is a view of the same memory, counted again in the same category.
    static Tensor view(Shape shape, DType dtype, std::shared_ptr<const void> storage, MemoryCategory category);
    bool is_view() const { return view_ != nullptr; }

    const Shape& shape() const { return shape_; }
    int64_t dim(int i) const { return shape_[i < 0 ? shape_.size() + i : i]; }
    int rank() const { return static_cast<int>(shape_.size()); }
    int64_t numel() const { return numel_; }
    bool empty() const { return numel_ == 0; }
    DType dtype() const { return dtype_; }

    // ---- device tensors ----
    // Uninitialised storage on `backend`'s device.
    static Tensor empty_on(Backend& backend, Shape shape, DType dtype);
    // A device tensor on the first bytes of `buffer`, shared with whoever else holds it (not a copy): a backend's
    // reused scratch (cuda/dequantize_ahead.h). InvalidArgument where the buffer is too small.
    static Tensor on_buffer(std::shared_ptr<DeviceBuffer> buffer, Shape shape, DType dtype);
    Device device() const { return device_ ? device_->backend().device() : Device{}; }
    bool on_device() const { return device_ != nullptr; }
    Backend& backend() const;  // a host tensor: InvalidArgument
    void* device_data();
    const void* device_data() const;
    // The device storage itself (null for a host tensor), shared: a weight store moves it off the device and
    // back (DeviceBuffer::offload, models/device_weights.h).
    const std::shared_ptr<DeviceBuffer>& device_buffer() const { return device_; }
    // The values on `backend`'s device, rounded to `dtype` (from the host or from another dtype there).
    Tensor to_device(Backend& backend, DType dtype) const;
    // The values on the host as float32 (a copy; a host float32 tensor is returned as is).
    Tensor to_host() const;

    // Float32 storage; a 16-bit tensor throws InvalidArgument naming its dtype (call to_f32() first).
    // The non-const accessors make a view's values the tensor's own first (see view()).
    float* data() { return require_f32(), own(), data_.data(); }
    const float* data() const { return require_f32(), f32(); }
    // F16/BF16 storage; a float32 tensor throws InvalidArgument.
    const uint16_t* bits16() const;
    // Block-format storage (is_block_quantized(dtype())); any other tensor throws InvalidArgument.
    const uint8_t* blocks() const;
    // The same values as float32 (a copy; exact for F16 and BF16).
    Tensor to_f32() const;
    // Row `row` of a [rows, ...] tensor of any dtype into out[numel / rows] as float32 (embedding lookups).
    void row_to_f32(int64_t row, float* out) const;
    // The values rounded to `dtype` (F32, F16 or BF16; round to nearest even), or quantized to a block format
    // (rows of whole blocks needed; a NaN or infinite value is InvalidArgument).
    Tensor converted(DType dtype) const;
    float& operator[](int64_t i) { return require_f32(), own(), data_[i]; }
    float operator[](int64_t i) const { return require_f32(), f32()[i]; }
    std::vector<float>& values() { return require_f32(), own(), data_; }
    // A view has no vector to hand out: InvalidArgument (read data() instead).
    const std::vector<float>& values() const { return require_f32(), require_owned(), data_; }

    // Same data, new shape of the same element count.
    Tensor reshaped(Shape shape) const&;
    Tensor reshaped(Shape shape) &&;
    // The first numel(shape) values, as a tensor of `shape` in this one's storage: no copy, and the whole
    // storage stays allocated, and counted, until the result is freed (a copy of the result counts as
    // much). For ops that write a smaller result over their input (ops::conv2d_group_norm_silu_inplace).
    Tensor first_values(Shape shape) &&;

private:
    void require_f32() const {
        if (dtype_ != DType::F32 || device_) throw_not_f32();
    }
    void require_host() const {
        if (device_) throw_not_host();
    }
    [[noreturn]] void throw_not_host() const;
    [[noreturn]] void throw_not_f32() const;
    // Where the values are: the tensor's own vectors, or a view's memory.
    const float* f32() const { return view_ ? static_cast<const float*>(view_.get()) : data_.data(); }
    const uint16_t* b16() const { return view_ ? static_cast<const uint16_t*>(view_.get()) : bits16_.data(); }
    const uint8_t* b8() const { return view_ ? static_cast<const uint8_t*>(view_.get()) : blocks_.data(); }
    // Any dtype's stored bytes on the host, for decode_to_float.
    const uint8_t* stored_bytes() const;
    void own() {
        if (view_) copy_out_of_view();
    }
    void copy_out_of_view();
    void require_owned() const;

    Shape shape_;
    int64_t numel_ = 0;
    DType dtype_ = DType::F32;
    std::vector<float> data_;       // F32
    std::vector<uint16_t> bits16_;  // F16, BF16
    std::vector<uint8_t> blocks_;   // block formats
    MemoryLease lease_;  // after data_: counted only once the storage exists
    std::shared_ptr<const void> view_;  // set for a view (then data_, bits16_ and blocks_ are empty)
    std::shared_ptr<DeviceBuffer> device_;  // set for a device tensor (then data_ and bits16_ are empty)
};

}  // namespace kiln
