#include "ops/blas.h"

#include <cblas.h>

#include <climits>
#include <string>

#include "kiln/error.h"

// Weak, so that kiln still links against a BLAS that is not OpenBLAS (then there is no pool to manage).
extern "C" {
void openblas_set_num_threads(int num_threads) __attribute__((weak));
int openblas_get_num_threads(void) __attribute__((weak));
}

namespace kiln::ops::blas {

namespace {
void check_fits(int64_t v, const char* what) {
    require(v >= 0 && v <= INT_MAX, ErrorKind::Unsupported,
            std::string("sgemm: ") + what + " = " + std::to_string(v) + " does not fit BLAS's 32-bit int");
}
}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    if (m == 0 || n == 0) return;
    if (k == 0) {  // an empty sum: BLAS implementations differ on k = 0, so do it here
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
        return;
    }
    check_fits(m, "m");
    check_fits(n, "n");
    check_fits(k, "k");
    check_fits(lda, "lda");
    check_fits(ldb, "ldb");
    check_fits(ldc, "ldc");
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
                static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

SingleThreaded::SingleThreaded() : saved_threads_(0) {
    if (openblas_get_num_threads && openblas_set_num_threads) {
        saved_threads_ = openblas_get_num_threads();
        if (saved_threads_ != 1) openblas_set_num_threads(1);
    }
}

SingleThreaded::~SingleThreaded() {
    if (saved_threads_ > 1 && openblas_set_num_threads) openblas_set_num_threads(saved_threads_);
}

}  // namespace kiln::ops::blas
