#include "runtime/cpu_threads.h"

#include <omp.h>

#include <string>

#include "kiln/error.h"

// Weak, as in ops/blas.cpp: kiln links against a BLAS that is not OpenBLAS too.
extern "C" {
void openblas_set_num_threads(int num_threads) __attribute__((weak));
}

namespace kiln {

int cpu_threads() { return omp_get_max_threads(); }

void set_cpu_threads(int n) {
    require(n >= 1 && n <= 4096, ErrorKind::InvalidArgument,
            "thread count must be between 1 and 4096, not " + std::to_string(n));
    omp_set_num_threads(n);
    if (openblas_set_num_threads) openblas_set_num_threads(n);
}

}  // namespace kiln
