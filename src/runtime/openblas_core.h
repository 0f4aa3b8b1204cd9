// Which OpenBLAS kernels a CPU run should ask for. OpenBLAS picks its kernels when it loads, by the CPU
// model it recognises; Debian 12's build (0.3.21) does not know CPUs newer than it (Intel's 5th Xeon
// generation, recent desktop parts) and falls back to its generic "Prescott" kernels, about 1.6x slower
// on kiln's tests here, although the CPU has AVX2 or AVX-512. The kiln program then starts again with
// OPENBLAS_CORETYPE set (main.cpp), since OpenBLAS reads it only when it loads.
#pragma once

#include <string>

namespace kiln {

// The OPENBLAS_CORETYPE that gives this CPU faster kernels than the loaded OpenBLAS chose ("SkylakeX" on
// an AVX-512 CPU, "Haswell" on an AVX2 one), or "" when OpenBLAS is not the BLAS, already runs more than
// its generic kernels, or the CPU has neither.
std::string better_openblas_core();

// The kernels OpenBLAS runs ("SkylakeX", "Haswell", "Prescott", ...), or "" when the BLAS is not OpenBLAS.
std::string openblas_core_name();

}  // namespace kiln
