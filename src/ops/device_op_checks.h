// Operand checks shared by the GPU backends' DeviceOps (CUDA, Vulkan): the error text names the op, the
// backend and each offending tensor's shape, dtype and device.
#pragma once
#include <string>

#include "core/tensor.h"
#include "kiln/error.h"

namespace kiln::ops {

inline std::string device_operand(const char* name, const Tensor& t) {
    return std::string(name) + " " + shape_str(t.shape()) + " " + dtype_name(t.dtype()) + " on " + device_name(t.device());
}

[[noreturn]] inline void bad_device_operands(const char* op, const Tensor& x, const std::string& what) {
    fail(ErrorKind::InvalidArgument,
         std::string("ops::") + op + " (" + device_kind_name(x.device().kind) + "): " + what);
}

// Every operand on x's device with x's dtype: a backend computes in one precision per call.
inline void require_same_place(const char* op, const Tensor& x, const Tensor& t, const char* name) {
    if (!t.on_device() || t.device() != x.device())
        bad_device_operands(op, x, device_operand(name, t) + " is not on " + device_name(x.device()));
    if (t.dtype() != x.dtype())
        bad_device_operands(op, x, device_operand(name, t) + " has another dtype than " + device_operand("x", x));
}

// A pointer `elements` values into a device tensor (device addresses are plain arithmetic on every backend).
inline const void* device_at(const Tensor& t, int64_t elements) {
    return static_cast<const char*>(t.device_data()) + elements * int64_t(dtype_size(t.dtype()));
}
inline void* device_at(Tensor& t, int64_t elements) {
    return static_cast<char*>(t.device_data()) + elements * int64_t(dtype_size(t.dtype()));
}

}  // namespace kiln::ops
