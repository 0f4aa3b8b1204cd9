// The CPU backend's thread count: OpenMP's team and OpenBLAS's pool together (the ops use both, never
// at once; see ops.h).
#pragma once

namespace kiln {

int cpu_threads();              // what the ops will use now
// n >= 1; anything else is InvalidArgument.
void set_cpu_threads(int n);

}  // namespace kiln
