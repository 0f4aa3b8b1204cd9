// The int8 product of block weights on the CPU (linear, conv2d): activations quantized on the fly per column
// (linear's row, conv2d's pixel) and 32-value block along K as q8_0 does (d = max|x| / 127, q = round(x / d),
// ties to even); each block's codes times the weight's codes in integers (exact; weight codes, scales and mins
// of every block format: int8_dot_weights.h; q6_K: dot_b = h0 * dot(values 0..15) + h1 * dot(values 16..31)
// with its halves' integer factors, exact too), then
//     y[o][col] = sum_b (dx[col][b] * dw[o][b]) * dot_b [+ mw[o][b] * sx[col][b]]   (float32 fmas, b in order)
// where sx = dx * sum_i q_i is the quantized block's sum (the min term of q4_1, q5_1, q4_K, q5_K).
// Every ISA path does exactly these operations in this order: they agree bit for bit. Against the dequantized
// product the difference is the activations' rounding, |x - q dx| <= dx / 2. A non-finite activation makes its
// block's scale NaN: every output that reads it is NaN (the float path gives NaN or +-inf there).
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "ops/checks.h"
#include "ops/int8_dot_weights.h"

namespace kiln::ops::detail {

// Kernels picked at run time: AVX-512 VNNI, AVX-VNNI (vpdpbusd on 256 bits: Alder Lake and later Intel consumer
// CPUs, which lack AVX-512), AVX2 or portable C++; the best available unless forced (tests; InvalidArgument if
// not available).
enum class Int8Isa { Scalar, Avx2, AvxVnni, Avx512Vnni };
const char* int8_isa_name(Int8Isa isa);
bool int8_isa_available(Int8Isa isa);
Int8Isa int8_isa();
void force_int8_isa(Int8Isa isa);

constexpr int kQ8Columns = 16, kQ8Block = 32;  // columns a group (an AVX-512 register's lanes); values a block

// Quantized activations. Per group of 16 columns and block: for t = 0..7, 16 x 4 bytes (column j's codes
// 4t..4t+3, plus 128: vpdpbusd's unsigned operand, at 4j), the 16 scales and the 16 sums dx * sum_i q_i (one
// rounding of an exact integer sum). Missing columns: codes 0, scale 0, sum 0.
class Q8Activations {
public:
    Q8Activations(int64_t k, int64_t columns, const char* op);  // k a multiple of 32

    // Column c's value kk is src[c * column_stride + kk * k_stride] (linear: [columns, k]; conv: [k, columns]).
    void quantize(const float* src, int64_t column_stride, int64_t k_stride);

    int64_t k_blocks() const { return k_blocks_; }
    int64_t columns() const { return columns_; }
    int64_t groups() const { return groups_; }
    const uint8_t* codes(int64_t g, int64_t b) const { return codes_ + (g * k_blocks_ + b) * kQ8Columns * kQ8Block; }
    const float* scales(int64_t g, int64_t b) const { return scales_ + (g * k_blocks_ + b) * kQ8Columns; }
    const float* sums(int64_t g, int64_t b) const { return sums_ + (g * k_blocks_ + b) * kQ8Columns; }

private:
    int64_t k_blocks_, columns_, groups_;
    Scratch storage_;
    float* scales_;
    float* sums_;
    uint8_t* codes_;
};

// c[o * ldc + col] (conv2d) or c[col * ldc + o] (linear).
enum class Q8Output { RowsByColumns, ColumnsByRows };

// c (+)= W x over all of w's rows and x's columns; OpenMP threads (call outside a parallel region).
void int8_gemm(const Int8Weights& w, const Q8Activations& x, float* c, int64_t ldc, Q8Output layout, bool accumulate);

}  // namespace kiln::ops::detail
