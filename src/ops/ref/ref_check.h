// Shape checks for the reference ops: they only guard the loops against misuse in tests.
#pragma once
#include <string>

#include "kiln/error.h"

namespace kiln::ops::ref {

inline void expect(bool ok, const char* op, const char* what) {
    if (!ok) fail(ErrorKind::InvalidArgument, std::string("ops::ref::") + op + ": " + what);
}

}  // namespace kiln::ops::ref
