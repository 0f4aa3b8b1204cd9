// A dense float32 tensor on the host in PyTorch's dimension order (row-major, N,C,H,W).
// This is the currency between models, samplers and the CPU backend.
// Its storage counts itself in the memory accounting (core/memory.h): numel * 4 bytes on "cpu", in the
// category current on the creating thread (Activations unless a MemoryCategoryScope says otherwise).
// A copy counts in the copier's category, a move keeps the count's category. Growing values() in place
// is not re-counted: make a new tensor instead.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

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

    const Shape& shape() const { return shape_; }
    int64_t dim(int i) const { return shape_[i < 0 ? shape_.size() + i : i]; }
    int rank() const { return static_cast<int>(shape_.size()); }
    int64_t numel() const { return static_cast<int64_t>(data_.size()); }
    bool empty() const { return data_.empty(); }

    float* data() { return data_.data(); }
    const float* data() const { return data_.data(); }
    float& operator[](int64_t i) { return data_[i]; }
    float operator[](int64_t i) const { return data_[i]; }
    std::vector<float>& values() { return data_; }
    const std::vector<float>& values() const { return data_; }

    // Same data, new shape of the same element count.
    Tensor reshaped(Shape shape) const&;
    Tensor reshaped(Shape shape) &&;

private:
    Shape shape_;
    std::vector<float> data_;
    MemoryLease lease_;  // after data_: counted only once the storage exists
};

}  // namespace kiln
