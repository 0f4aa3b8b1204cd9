// The ops' tuning knobs, exposed for tests (to force several tiles or blocks on small shapes) and for
// benchmarks. The public ops in ops.h call these with the defaults below.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace kiln::ops::detail {

// Largest im2col buffer conv2d allocates; bigger convolutions run in tiles of output pixels. 16 MB
// (an L3's worth) measured ~10% faster than one 47 MB buffer for SD's 3x3 320-channel 64x64 conv,
// and smaller tiles lose again to per-call sgemm overhead.
constexpr int64_t kIm2colBudgetBytes = int64_t(16) << 20;

// Largest float32 copy of an F16/BF16 weight linear and conv2d convert at once (weight_rows.h). 32 MB
// holds every SD 1.5 / SDXL linear weight and all but the 2560-channel 3x3 convolutions (118 MB as
// float32) in one tile, so almost every layer converts once per call.
constexpr int64_t kWeightTileBudgetBytes = int64_t(32) << 20;

// conv2d with an explicit im2col budget (at least one column is always allowed) and, for F16/BF16
// weights, budget of converted weight rows (at least one row; default weight_rows.h's).
Tensor conv2d_tiled(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int padding,
                    int64_t im2col_budget_bytes, int64_t weight_budget_bytes = kWeightTileBudgetBytes);

// Per (image, channel) plane of x [N, C, ...]: group_norm's y = x * scale + shift (checks as group_norm).
void group_norm_affine(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta, float eps,
                       std::vector<float>& scale, std::vector<float>& shift);

// group_norm_affine in parts, for statistics gathered over several pieces of a tensor (a tiled VAE decode):
// adds, for each of `planes` runs of `length` floats `plane_stride` apart from x, their sum and sum of squares
// (in double) to sum[p] and sum_sq[p]; and group_norm's scale and shift from such sums over [N, C] planes of
// plane_count values each (gamma and beta float32 on the host).
void add_plane_sums(const float* x, int64_t planes, int64_t plane_stride, int64_t length, double* sum,
                    double* sum_sq);
void group_norm_scale_shift(const std::vector<double>& sum, const std::vector<double>& sum_sq, int64_t plane_count,
                            int64_t n_img, int64_t channels, int groups, const Tensor& gamma, const Tensor& beta,
                            float eps, std::vector<float>& scale, std::vector<float>& shift);

// conv2d_group_norm_silu with explicit budgets (as conv2d_tiled).
Tensor conv2d_group_norm_silu_tiled(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta, float eps,
                                    const Tensor& w, const Tensor* b, int stride, int padding,
                                    int64_t im2col_budget_bytes, int64_t weight_budget_bytes = kWeightTileBudgetBytes);

// conv2d_upsample2x with explicit budgets (as conv2d_tiled).
Tensor conv2d_upsample2x_tiled(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int padding,
                               int64_t im2col_budget_bytes, int64_t weight_budget_bytes = kWeightTileBudgetBytes);

// conv2d_group_norm_silu_add_ and conv2d_group_norm_silu_inplace with explicit budgets (as conv2d_tiled).
void conv2d_group_norm_silu_add_tiled(Tensor& y, const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                                      float eps, const Tensor& w, const Tensor* b, int stride, int padding,
                                      int64_t im2col_budget_bytes,
                                      int64_t weight_budget_bytes = kWeightTileBudgetBytes);
Tensor conv2d_group_norm_silu_inplace_tiled(Tensor x, int groups, const Tensor& gamma, const Tensor& beta, float eps,
                                            const Tensor& w, const Tensor* b, int stride, int padding,
                                            int64_t im2col_budget_bytes,
                                            int64_t weight_budget_bytes = kWeightTileBudgetBytes);

// linear with an explicit budget of converted weight rows for F16/BF16 weights.
Tensor linear_tiled(const Tensor& x, const Tensor& w, const Tensor* b, int64_t weight_budget_bytes);

// Query rows per attention block for these sizes on `threads` threads (the default policy).
int64_t attention_block_rows(int64_t lq, int64_t lk, int64_t batch_heads, int threads);

// attention with an explicit number of query rows per block; 0 picks attention_block_rows.
Tensor attention_blocked(const Tensor& q, const Tensor& k, const Tensor& v, int heads, bool causal,
                         int64_t block_rows);

}  // namespace kiln::ops::detail
