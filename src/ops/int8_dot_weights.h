// A block weight's rows as the int8 product reads them (int8_dot.h): sub-blocks of 32 values along K, each
//     value_i = scale * code_i + min        (code_i an int8; no min for q8_0, q4_0 and q5_0)
// q8_0's codes are its blocks' bytes, read in place. The other formats (q4_0, q4_1, q5_0, q5_1, q4_K, q5_K,
// q6_K, q3_K) are widened a tile of rows at a time into a small scratch just before the tile's dot products, so no
// widened copy of the whole matrix ever exists. Codes: q4_0 q - 8, q5_0 q - 16, q6_K q - 32 (signed), the
// others q as stored (0..31); scale and min as the dequantizers compute them (quant/*.h): d, m; q4_K/q5_K d * sc
// and -(dmin * m), each one float32 rounding. q6_K has a scale per 16 values, d * sc[s] with sc an int8: its
// sub-block's scale is d, and each half of 16 values has the integer factor sc[s] (halves), so that
//     value_i = d * (sc[s] * code_i)   exactly its dequantizer's d * sc * (q - 32): 11 + 7 + 5 significant bits,
// no rounding. q3_K likewise: codes q (-4..3), halves sc - 32, scale d (11 + 6 + 3 bits).
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "ops/checks.h"

namespace kiln::ops::detail {

// Whether the int8 product takes weights of this dtype (else linear and conv2d dequantize them).
bool int8_products_take(DType dtype);

// One row's sub-blocks: sub-block b's 32 codes at codes + b * code_stride, its scale, 128 x the sum of its codes
// (what vpdpbusd's +128 activations add to its dot) and its min (mins nullptr: none). With halves (q6_K): the
// integer factors of its two halves of 16 values at halves[2b], halves[2b + 1], and one offset a half
// (offsets[2b], offsets[2b + 1]).
struct Int8Row {
    const uint8_t* codes;
    int64_t code_stride;
    const float* scales;
    const int32_t* offsets;
    const float* mins;
    const int32_t* halves;
};

class Int8Weights {
public:
    // w: [rows, ...], rows of whole blocks of a dtype int8_products_take (InvalidArgument otherwise).
    Int8Weights(const Tensor& w, const char* op);

    int64_t rows() const { return rows_; }
    int64_t k_blocks() const { return k_blocks_; }  // 32-value sub-blocks a row
    bool has_mins() const;
    bool has_halves() const { return dtype_ == DType::Q6_K || dtype_ == DType::Q3_K; }
    // Scratch bytes rows_view needs for `count` rows: 0 where the rows are read in place (q8_0).
    int64_t scratch_bytes(int count) const;
    // Rows [first, first + count) into out[0..count): views of the weight, or widened into scratch (scratch_bytes
    // of them, 4-aligned), valid while it is not reused.
    void rows_view(int64_t first, int count, uint8_t* scratch, Int8Row* out) const;

private:
    DType dtype_;
    int64_t rows_, k_blocks_, row_bytes_;
    const uint8_t* blocks_;
    Scratch q8_;  // q8_0: every block's scale, then its offset
};

}  // namespace kiln::ops::detail
