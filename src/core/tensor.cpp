#include "core/tensor.h"

#include "kiln/error.h"

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

Tensor::Tensor(Shape shape)
    : shape_(std::move(shape)), data_(shape_numel(shape_), 0.0f), lease_(int64_t(data_.size() * sizeof(float))) {}

Tensor::Tensor(Shape shape, std::vector<float> values)
    : shape_(std::move(shape)), data_(std::move(values)), lease_(int64_t(data_.size() * sizeof(float))) {
    require(shape_numel(shape_) == static_cast<int64_t>(data_.size()), ErrorKind::InvalidArgument,
            "tensor of shape " + shape_str(shape_) + " given " + std::to_string(data_.size()) + " values");
}

Tensor Tensor::filled(Shape shape, float value) {
    Tensor t(std::move(shape));
    for (float& v : t.data_) v = value;
    return t;
}

Tensor Tensor::reshaped(Shape shape) const& { return Tensor(std::move(shape), data_); }
// The storage changes hands without a copy, so its count keeps its category (weights reshaped while
// loading stay weights).
Tensor Tensor::reshaped(Shape shape) && {
    require(shape_numel(shape) == static_cast<int64_t>(data_.size()), ErrorKind::InvalidArgument,
            "tensor of shape " + shape_str(shape) + " given " + std::to_string(data_.size()) + " values");
    Tensor out;
    out.shape_ = std::move(shape);
    out.data_ = std::move(data_);
    out.lease_ = std::move(lease_);
    data_.clear();
    return out;
}

}  // namespace kiln
