// Matrix products on the tensor cores through cuBLASLt, column-major as cuBLAS counts (row-major callers
// swap operands: see cuda_device_ops.cpp). C = alpha * op(A) op(B) + beta * C with op(A) m x k, op(B) k x n,
// C m x n; A and B share a dtype, C may be wider (F16 inputs with an F32 C: attention scores). Products
// accumulate in float32 (F32 inputs: full float32 unless tf32 is asked for). Algorithms: the fastest of up to 8
// that cuBLASLt's heuristic offers for the exact shape, strides and pointer alignment, timed on the shape's
// first product (into scratch, never inside a stream capture: there the heuristic's first), cached per shape.
// So which algorithm runs, and the last bits of a result, may differ between processes, as with the
// convolution routes.
#pragma once
#include <cstdint>
#include <memory>

#include "backends/cuda/gpu_runtime.h"
#include "core/dtype.h"

namespace kiln::cuda {

struct GemmArgs {
    bool trans_a = false, trans_b = false;
    int64_t m = 0, n = 0, k = 0;
    const void* a = nullptr;
    int64_t lda = 0;
    const void* b = nullptr;
    int64_t ldb = 0;
    void* c = nullptr;
    int64_t ldc = 0;
    DType ab_type = DType::F16, c_type = DType::F16;
    float alpha = 1.0f, beta = 0.0f;
    bool tf32 = false;  // F32 inputs: TF32 tensor cores (float32 range, 10-bit mantissa) instead of full float32
    // Added to every column of C in the product's epilogue (cuBLASLt's BIAS epilogue: one rounding of product +
    // bias, no second pass over C): m values in C's type. Null: none. Not with batches.
    const void* bias = nullptr;
    int batch = 1;  // strided batches; strides in elements, none of them 0
    int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

class Gemm {
public:
    Gemm();  // creates the cuBLASLt handle and a 32 MiB workspace on the current device
    ~Gemm();
    Gemm(const Gemm&) = delete;
    Gemm& operator=(const Gemm&) = delete;
    void run(const GemmArgs& args, cudaStream_t stream);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::cuda
