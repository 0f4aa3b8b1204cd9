// When a loop is worth OpenMP threads: below this many elements of work the fork/join costs more
// than it saves. Used as `#pragma omp parallel for if (work >= kParallelMinWork)`.
#pragma once
#include <cstdint>

namespace kiln::ops::detail {

constexpr int64_t kParallelMinWork = 1 << 15;

}  // namespace kiln::ops::detail
