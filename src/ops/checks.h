// Shape checks shared by the ops: every failure is a kiln::Error (InvalidArgument) whose message
// starts with the op's name and shows the shapes involved.
#pragma once
#include <string>

#include "core/tensor.h"
#include "kiln/error.h"

namespace kiln::ops::detail {

inline void check(bool ok, const char* op, const std::string& what) {
    if (!ok) fail(ErrorKind::InvalidArgument, std::string("ops::") + op + ": " + what);
}

// "name [2, 3]", for messages.
inline std::string desc(const char* name, const Tensor& t) { return std::string(name) + " " + shape_str(t.shape()); }

}  // namespace kiln::ops::detail
