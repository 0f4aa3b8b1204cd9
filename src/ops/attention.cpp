// attention: softmax(q k^T / sqrt(D)) v per (batch, head), one block of query rows at a time.
// A block's scores [rows x Lk] are the only part of the score matrix that exists: sgemm writes them,
// the softmax runs in place (unnormalised), a second sgemm multiplies by v, and the output rows are
// divided by their sums last (D multiplies per row instead of Lk). Blocks run on OpenMP threads, each
// calling single-threaded sgemm.
#include "ops/no_trapping_math.h"  // first: see there
#include <omp.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <memory>

#include "ops/blas.h"
#include "ops/checks.h"
#include "ops/device_ops.h"
#include "ops/ops.h"
#include "ops/tuning.h"
#include "ops/vec_math.h"

namespace kiln::ops {

namespace {

// Softmax of one score row in place, unnormalised (e^(s - max)); keys from `valid` on are masked to 0.
// Returns 1 / sum.
float softmax_row_unnormalised(float* row, int64_t valid, int64_t keys) {
    float m = row[0];
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < valid; ++j) m = std::max(m, row[j]);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < valid; ++j) {
        const float e = vec::exp_nonpositive(row[j] - m);
        row[j] = e;
        sum += e;
    }
    std::fill(row + valid, row + keys, 0.0f);
    return 1.0f / sum;
}

}  // namespace

// Query rows per block: the score block should stay in a core's L2 (~1 MB), and there should be
// enough blocks to keep every thread busy.
int64_t detail::attention_block_rows(int64_t lq, int64_t lk, int64_t batch_heads, int threads) {
    constexpr int64_t kScoreBlockBytes = int64_t(1) << 20;
    int64_t rows = std::clamp<int64_t>(kScoreBlockBytes / (std::max<int64_t>(lk, 1) * int64_t(sizeof(float))), 16, 256);
    while (rows > 16 && batch_heads * ((lq + rows - 1) / rows) < 2 * int64_t(threads)) rows /= 2;
    return std::min(rows, std::max<int64_t>(lq, 1));
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, int heads, bool causal) {
    if (q.on_device()) return device_ops(q).attention(q, k, v, heads, causal);
    return detail::attention_blocked(q, k, v, heads, causal, 0);
}

Tensor attention_qkv(const Tensor& qkv, int heads) {
    detail::check(qkv.rank() == 3 && qkv.dim(2) % 3 == 0, "attention_qkv",
                  detail::desc("qkv", qkv) + " must be [B, L, 3C]: q | k | v of each token");
    if (qkv.on_device()) return device_ops(qkv).attention_qkv(qkv, heads);
    const int64_t c = qkv.dim(2) / 3;
    return attention(columns(qkv, 0, c), columns(qkv, c, c), columns(qkv, 2 * c, c), heads);
}

Tensor attention_kv(const Tensor& q, const Tensor& kv, int heads, int64_t at) {
    detail::check(q.rank() == 3 && kv.rank() == 3 && at >= 0 && at + 2 * q.dim(2) <= kv.dim(2), "attention_kv",
                  detail::desc("q", q) + " [B, Lq, C] and " + detail::desc("kv", kv) + " [B, Lk, W]: k | v at column " +
                      std::to_string(at) + ", within W");
    if (q.on_device()) return device_ops(q).attention_kv(q, kv, heads, at);
    const int64_t c = q.dim(2);
    return attention(q, columns(kv, at, c), columns(kv, at + c, c), heads);
}

Tensor detail::attention_blocked(const Tensor& q, const Tensor& k, const Tensor& v, int heads, bool causal,
                                 int64_t block_rows) {
    using detail::check;
    using detail::desc;
    const std::string shapes = desc("q", q) + ", " + desc("k", k) + ", " + desc("v", v);
    check(q.rank() == 3 && k.rank() == 3 && v.rank() == 3, "attention", shapes + ": each must be [B, L, heads*D]");
    check(q.dim(0) == k.dim(0) && k.dim(0) == v.dim(0), "attention", shapes + ": batch sizes differ");
    check(k.dim(1) == v.dim(1), "attention", shapes + ": k and v must have the same length");
    check(q.dim(2) == k.dim(2) && k.dim(2) == v.dim(2), "attention", shapes + ": widths (heads*D) differ");
    check(heads >= 1 && q.dim(2) > 0 && q.dim(2) % heads == 0, "attention",
          shapes + ": width " + std::to_string(q.dim(2)) + " is not a positive multiple of heads = " + std::to_string(heads));
    check(k.dim(1) >= 1, "attention", shapes + ": no keys");
    check(block_rows >= 0, "attention", "block_rows must be >= 0");
    require(k.dim(1) <= INT_MAX && q.dim(2) <= INT_MAX, ErrorKind::Unsupported,
            "ops::attention: " + shapes + " exceed BLAS's 32-bit sizes");

    const int64_t batch = q.dim(0), lq = q.dim(1), lk = k.dim(1), width = q.dim(2);
    const int64_t d = width / heads;
    Tensor out({batch, lq, width});
    OpScope scope(OpKind::Attention, 4.0 * static_cast<double>(batch * heads) * static_cast<double>(lq) *
                                         static_cast<double>(lk) * static_cast<double>(d));
    if (out.empty()) return out;

    const int threads = omp_get_max_threads();
    const int64_t rows_per_block =
        block_rows > 0 ? std::min({block_rows, lq, int64_t(1) << 16})  // keeps sgemm's m in int range
                       : attention_block_rows(lq, lk, batch * heads, threads);
    const int64_t blocks = (lq + rows_per_block - 1) / rows_per_block;
    const int64_t tasks = batch * heads * blocks;
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    // Allocated here: an exception must not escape an OpenMP region.
    const int64_t block_floats = rows_per_block * lk;
    const detail::Scratch scores = detail::scratch_floats(block_floats * threads, "attention");
    const detail::Scratch inv_sums = detail::scratch_floats(rows_per_block * threads, "attention");

    const float* qp = q.data();
    const float* kp = k.data();
    const float* vp = v.data();
    float* op = out.data();
    blas::SingleThreaded one_blas_thread;  // the parallelism is over blocks
#pragma omp parallel num_threads(threads)
    {
        float* s = scores.get() + block_floats * omp_get_thread_num();
        float* inv = inv_sums.get() + rows_per_block * omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)  // tasks are ~1 ms; dynamic rides out a descheduled thread
        for (int64_t task = 0; task < tasks; ++task) {
            const int64_t blk = task % blocks, bh = task / blocks;
            const int64_t b = bh / heads, h = bh % heads;
            const int64_t q0 = blk * rows_per_block, rows = std::min(rows_per_block, lq - q0);
            // Causal (top-left aligned): query i sees keys 0..i, so this block needs keys < q0 + rows.
            const int64_t keys = causal ? std::min(lk, q0 + rows) : lk;
            const float* qb = qp + (b * lq + q0) * width + h * d;
            const float* kb = kp + b * lk * width + h * d;
            const float* vb = vp + b * lk * width + h * d;
            float* ob = op + (b * lq + q0) * width + h * d;

            blas::gemm(false, true, rows, keys, d, scale, qb, width, kb, width, 0.0f, s, keys);
            for (int64_t i = 0; i < rows; ++i) {
                const int64_t valid = causal ? std::min(keys, q0 + i + 1) : keys;
                inv[i] = softmax_row_unnormalised(s + i * keys, valid, keys);
            }
            blas::gemm(false, false, rows, d, keys, 1.0f, s, keys, vb, width, 0.0f, ob, width);
            for (int64_t i = 0; i < rows; ++i) {
                float* orow = ob + i * width;
                for (int64_t c = 0; c < d; ++c) orow[c] *= inv[i];
            }
        }
    }
    return out;
}

}  // namespace kiln::ops
