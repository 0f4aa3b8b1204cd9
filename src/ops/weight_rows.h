// Float32 rows of a weight matrix for the sgemm calls of linear and conv2d. A float32 weight is read
// in place; an F16/BF16 weight (kept in the precision its file stores, for half the memory) or a block-format
// weight (Q8_0/Q4_0/Q4_1, a quarter to an eighth of it: quant/block_formats.h) is converted a tile of rows
// at a time into scratch, so conversion never needs more than kWeightTileBudgetBytes however large the
// layer is. Rows of a block-format tensor are whole blocks (Tensor::from_blocks), so a tile starts a block.
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/dtype_convert.h"
#include "core/tensor.h"
#include "ops/checks.h"
#include "ops/tuning.h"

namespace kiln::ops::detail {

class WeightRows {
public:
    // w: [rows, ...]; each row is numel / rows values.
    WeightRows(const Tensor& w, const char* op, int64_t budget_bytes = kWeightTileBudgetBytes)
        : w_(w), rows_(w.rank() ? w.dim(0) : 0), cols_(rows_ ? w.numel() / rows_ : 0) {
        if (w.dtype() == DType::F32) {
            tile_rows_ = rows_;
            return;
        }
        check(w.dtype() == DType::F16 || w.dtype() == DType::BF16 || is_block_quantized(w.dtype()), op,
              std::string("weight of dtype ") + dtype_name(w.dtype()) + " is not supported");
        tile_rows_ = tile_rows_for(w, budget_bytes);
        scratch_ = scratch_floats(tile_rows_ * cols_, op);
    }

    // The rows of w converted at once: all of them for float32, else as many as fit the budget (>= 1).
    static int64_t tile_rows_for(const Tensor& w, int64_t budget_bytes = kWeightTileBudgetBytes) {
        const int64_t rows = w.rank() ? w.dim(0) : 0, cols = rows ? w.numel() / rows : 0;
        if (w.dtype() == DType::F32) return rows;
        return std::clamp<int64_t>(budget_bytes / std::max<int64_t>(cols * int64_t(sizeof(float)), 1), 1,
                                   std::max<int64_t>(rows, 1));
    }

    int64_t tile_rows() const { return tile_rows_; }  // all rows for a float32 weight

    // Rows [first, first + count) as float32, count <= tile_rows(); valid until the next call.
    const float* rows(int64_t first, int64_t count) {
        if (w_.dtype() == DType::F32) return w_.data() + first * cols_;
        const uint8_t* src = is_block_quantized(w_.dtype())
                                 ? w_.blocks() + dtype_storage_bytes(w_.dtype(), first * cols_)
                                 : reinterpret_cast<const uint8_t*>(w_.bits16() + first * cols_);
        decode_to_float(w_.dtype(), src, scratch_.get(), static_cast<size_t>(count * cols_));
        return scratch_.get();
    }

private:
    const Tensor& w_;
    int64_t rows_, cols_, tile_rows_ = 0;
    Scratch scratch_;
};

}  // namespace kiln::ops::detail
