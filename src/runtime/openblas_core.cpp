#include "runtime/openblas_core.h"

#include <strings.h>

// Weak, as in ops/blas.cpp: kiln links against a BLAS that is not OpenBLAS too.
extern "C" {
char* openblas_get_corename(void) __attribute__((weak));
}

namespace kiln {

std::string openblas_core_name() {
    const char* core = openblas_get_corename ? openblas_get_corename() : nullptr;
    return core ? core : "";
}

std::string better_openblas_core() {
    const std::string name = openblas_core_name();
    const char* core = name.c_str();
    // The cores OpenBLAS falls back to: SSE3 kernels on a CPU it cannot place.
    const bool generic = strcasecmp(core, "Prescott") == 0 || strcasecmp(core, "Core2") == 0 ||
                         strcasecmp(core, "Nehalem") == 0;
    if (!generic) return "";
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
    return "";
}

}  // namespace kiln
