// Shape checks shared by the ops: every failure is a kiln::Error (InvalidArgument) whose message
// starts with the op's name and shows the shapes involved.
#pragma once
#include <cstdint>
#include <memory>
#include <new>
#include <string>

#include "core/memory.h"
#include "core/tensor.h"
#include "kiln/error.h"

namespace kiln::ops::detail {

inline void check(bool ok, const char* op, const std::string& what) {
    if (!ok) fail(ErrorKind::InvalidArgument, std::string("ops::") + op + ": " + what);
}

// "name [2, 3]", for messages.
inline std::string desc(const char* name, const Tensor& t) { return std::string(name) + " " + shape_str(t.shape()); }

// Uninitialised scratch of n floats, counted as workspace memory while it lives.
struct Scratch {
    std::unique_ptr<float[]> data;
    MemoryLease lease;
    float* get() const { return data.get(); }
};

// An allocation failure is kiln::Error OutOfMemory (recoverable: a caller may retry with smaller
// work) rather than std::bad_alloc.
inline Scratch scratch_floats(int64_t n, const char* op) {
    try {
        return Scratch{std::unique_ptr<float[]>(new float[static_cast<size_t>(n)]),
                       MemoryLease(n * int64_t(sizeof(float)), MemoryCategory::Workspace)};
    } catch (const std::bad_alloc&) {
        fail(ErrorKind::OutOfMemory, std::string("ops::") + op + ": cannot allocate " +
                                         std::to_string(n * int64_t(sizeof(float))) + " bytes of scratch");
    }
}

}  // namespace kiln::ops::detail
