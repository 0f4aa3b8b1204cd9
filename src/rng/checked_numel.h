// Element count of a requested noise shape, validated (no negative sizes, no overflow, a size the
// host can hold), so that a bad request is a kiln::Error rather than a crash or a huge allocation.
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace kiln {

int64_t checked_numel(const Shape& shape, const std::string& who);

}  // namespace kiln
