// The int8 product of Q8_0 weights on the CPU (linear and conv2d): the activations are quantized on the fly,
// per column (linear's row, conv2d's output pixel) and 32-value block along K, to int8 codes and a float scale
// as q8_0 does (d = max|x| / 127, q = round(x / d)); each block's codes are multiplied with the weight's codes
// in integers (exact), then scaled by both blocks' scales and summed over the blocks in float32:
//     y[o][col] = sum_b  (dx[col][b] * dw[o][b]) * sum_i qx[col][b][i] qw[o][b][i]    (fma, b in order)
// Every ISA path computes exactly these operations in this order, so they agree bit for bit. Against the
// dequantized product the difference is the activations' rounding (|x - q dx| <= dx / 2 per value): about 0.2%
// of a block's largest value. A non-finite activation makes its block's scale NaN, so every output that reads
// it is NaN (the float path gives NaN or +-inf there).
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "ops/checks.h"

namespace kiln::ops::detail {

// The kernels, chosen at run time: AVX-512 VNNI (vpdpbusd), AVX2 (vpmaddubsw) or portable C++.
enum class Int8Isa { Scalar, Avx2, Avx512Vnni };
const char* int8_isa_name(Int8Isa isa);
bool int8_isa_available(Int8Isa isa);  // this CPU (and this build) can run it
Int8Isa int8_isa();                    // the one in use: the best available unless forced
void force_int8_isa(Int8Isa isa);      // for tests and measurements; InvalidArgument if not available

constexpr int kQ8Columns = 16;  // columns per group: one AVX-512 register of int32 or float lanes
constexpr int kQ8Block = 32;    // values per block along K (q8_0's)

// Activations quantized for the product. Per group of 16 columns and block of K: for t = 0..7, 16 x 4 bytes,
// column j's codes 4t..4t+3 plus 128 (unsigned: vpdpbusd's first operand) at 4j; and the 16 columns' scales.
// Columns past the last are codes 0 with scale 0.
class Q8Activations {
public:
    Q8Activations(int64_t k, int64_t columns, const char* op);  // k a multiple of 32

    // Column c's value kk is src[c * column_stride + kk * k_stride] (linear: [columns, k]; conv: [k, columns]).
    void quantize(const float* src, int64_t column_stride, int64_t k_stride);

    int64_t k_blocks() const { return k_blocks_; }
    int64_t columns() const { return columns_; }
    int64_t groups() const { return groups_; }
    const uint8_t* codes(int64_t group, int64_t block) const {
        return codes_ + (group * k_blocks_ + block) * (kQ8Columns * kQ8Block);
    }
    const float* scales(int64_t group, int64_t block) const {
        return scales_ + (group * k_blocks_ + block) * kQ8Columns;
    }
    uint8_t* codes(int64_t group, int64_t block) {
        return codes_ + (group * k_blocks_ + block) * (kQ8Columns * kQ8Block);
    }
    float* scales(int64_t group, int64_t block) { return scales_ + (group * k_blocks_ + block) * kQ8Columns; }

private:
    int64_t k_blocks_, columns_, groups_;
    Scratch storage_;
    float* scales_;
    uint8_t* codes_;
};

// A Q8_0 weight [rows, ...] read as rows of K = numel / rows values: its codes in place, each block's scale as
// float32 and 128 times the sum of its codes (what the unsigned activations' offset adds to a block's dot).
class Q8Weights {
public:
    Q8Weights(const Tensor& w, const char* op);

    int64_t rows() const { return rows_; }
    int64_t k_blocks() const { return k_blocks_; }
    const uint8_t* block(int64_t row, int64_t b) const { return blocks_ + (row * k_blocks_ + b) * 34; }
    float scale(int64_t row, int64_t b) const { return scales_[row * k_blocks_ + b]; }
    int32_t offset(int64_t row, int64_t b) const { return offsets_[row * k_blocks_ + b]; }

private:
    int64_t rows_, k_blocks_;
    const uint8_t* blocks_;
    Scratch storage_;
    const float* scales_;
    const int32_t* offsets_;
};

// Output layout of q8_gemm: c[o * ldc + col] (conv2d: channels x pixels) or c[col * ldc + o] (linear).
enum class Q8Output { RowsByColumns, ColumnsByRows };

// c (+)= W x for all of w's rows and x's columns: adds onto c with `accumulate`, else overwrites it. Runs on
// OpenMP threads (call it outside a parallel region). w.k_blocks() must equal x.k_blocks().
void q8_gemm(const Q8Weights& w, const Q8Activations& x, float* c, int64_t ldc, Q8Output layout, bool accumulate);

}  // namespace kiln::ops::detail
