// The ops' one door to BLAS: row-major sgemm with 64-bit sizes checked against BLAS's int, and control
// of OpenBLAS's own thread pool so that it never competes with OpenMP's.
#pragma once
#include <cstdint>

namespace kiln::ops::blas {

// C[m x n] = alpha * op(A) op(B) + beta * C, all row-major; op(A) is m x k, op(B) is k x n.
// Throws kiln::Error (Unsupported) when a size or leading dimension does not fit BLAS's int.
// Call it outside OpenMP parallel regions (OpenBLAS then uses its own threads), or inside one only
// under a SingleThreaded scope.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// While alive, OpenBLAS runs every call on the calling thread, so that each OpenMP thread can call
// gemm on its own block without OpenBLAS starting its pool on top (threads x threads oversubscription).
// Construct it outside the parallel region. A no-op when the BLAS in use is not OpenBLAS.
class SingleThreaded {
public:
    SingleThreaded();
    ~SingleThreaded();
    SingleThreaded(const SingleThreaded&) = delete;
    SingleThreaded& operator=(const SingleThreaded&) = delete;

private:
    int saved_threads_;
};

}  // namespace kiln::ops::blas
