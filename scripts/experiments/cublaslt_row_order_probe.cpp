// Experiment (not part of the build): whether cuBLASLt can write a transformer's proj_out straight into the NCHW
// residual, which would spare kiln's add_nlc_ pass (a transpose that adds onto the residual) after each of the
// UNet's 16 transformers. Per image: D = W x_b^T + bias + C, with D and C [cout, tokens] in row order (NCHW),
// against today's product into [tokens, cout] (column order, no C) that add_nlc_ then moves. SD 1.5's four
// widths at batch 2; fp16 with float32 accumulation; each variant the fastest of the heuristic's first 8
// algorithms, median of 50 event-timed runs (single runs between events: launch overhead included, so the
// times say which layouts run, not how fast). Session 10 on the H200 (CUDA 13.0's cuBLASLt): the row-ordered D
// with a bias epilogue has no algorithm (CUBLAS_STATUS_NOT_SUPPORTED), with every matrix in row order neither;
// without the bias it runs. docs/CUDA.md has what that leaves.
// Build: g++ -O2 -std=c++17 cublaslt_row_order_probe.cpp -I/usr/local/cuda/include -L/usr/local/cuda/lib64 \
//          -lcublasLt -lcudart
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "probe_check.h"

namespace {

struct Shape {
    int tokens, width;  // per image; 2 images
};

cublasLtMatrixLayout_t layout(int rows, int cols, int64_t ld, bool row_order, int64_t stride) {
    cublasLtMatrixLayout_t l;
    CK(cublasLtMatrixLayoutCreate(&l, CUDA_R_16F, rows, cols, ld));
    const cublasLtOrder_t order = row_order ? CUBLASLT_ORDER_ROW : CUBLASLT_ORDER_COL;
    CK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof order));
    const int batch = 2;
    CK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
    CK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    return l;
}

// The fastest of the heuristic's first 8 algorithms for D = op(A) op(B) + beta C (+ bias), in ms; -1 if none.
float fastest(cublasLtHandle_t lt, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
              cublasLtMatrixLayout_t c, const void* A, const void* B, void* C, float beta, void* ws, size_t ws_bytes) {
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes));
    cublasLtMatmulHeuristicResult_t results[8];
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, pref, 8, results, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
        std::printf("  (heuristic: status %d, %d algorithms)\n", int(st), found);
        return -1.0f;
    }
    const float alpha = 1.0f;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float best = -1.0f;
    for (int i = 0; i < found; ++i) {
        auto run = [&] {
            return cublasLtMatmul(lt, op, &alpha, A, a, B, b, &beta, C, c, C, c, &results[i].algo, ws, ws_bytes, 0);
        };
        if (run() != CUBLAS_STATUS_SUCCESS) continue;
        std::vector<float> ms;
        for (int r = 0; r < 50; ++r) {
            CK(cudaEventRecord(e0));
            CK(run());
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float t = 0;
            CK(cudaEventElapsedTime(&t, e0, e1));
            ms.push_back(t);
        }
        std::sort(ms.begin(), ms.end());
        if (best < 0 || ms[25] < best) best = ms[25];
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return best;
}

}  // namespace

int main() {
    cublasLtHandle_t lt;
    CK(cublasLtCreate(&lt));
    const size_t ws_bytes = size_t(32) << 20;
    void *ws = nullptr, *A = nullptr, *B = nullptr, *C = nullptr, *bias = nullptr;
    CK(cudaMalloc(&ws, ws_bytes));
    const size_t most = size_t(2) * 4096 * 1280;  // the largest x or output
    CK(cudaMalloc(&A, size_t(1280) * 1280 * 2));
    CK(cudaMalloc(&B, most * 2));
    CK(cudaMalloc(&C, most * 2));
    CK(cudaMalloc(&bias, 1280 * 2));
    CK(cudaMemset(A, 0, size_t(1280) * 1280 * 2));
    CK(cudaMemset(B, 0, most * 2));
    CK(cudaMemset(C, 0, most * 2));
    CK(cudaMemset(bias, 0, 1280 * 2));
    const Shape shapes[] = {{4096, 320}, {1024, 640}, {256, 1280}, {64, 1280}};
    std::printf("tokens x width (2 images): today's product into [tokens, cout] | into NCHW onto the residual, ms\n");
    for (const Shape& s : shapes) {
        const int L = s.tokens, C_ = s.width;
        const cublasLtEpilogue_t bias_epilogue = CUBLASLT_EPILOGUE_BIAS;
        // Today: D [cout x L] column order (= [L, cout] row-major tokens) = W (A^T) * x^T.
        cublasLtMatmulDesc_t op;
        CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
        CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
        CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n));
        CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &bias_epilogue, sizeof bias_epilogue));
        CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
        cublasLtMatrixLayout_t a = layout(C_, C_, C_, false, 0);                       // W as [cin x cout]^T
        cublasLtMatrixLayout_t b = layout(C_, L, C_, false, int64_t(L) * C_);          // x_b^T: [cin x L]
        cublasLtMatrixLayout_t d_col = layout(C_, L, C_, false, int64_t(L) * C_);      // [cout x L] column order
        cublasLtMatrixLayout_t d_row = layout(C_, L, L, true, int64_t(L) * C_);        // [cout x L] row order: NCHW
        const float today = fastest(lt, op, a, b, d_col, A, B, C, 0.0f, ws, ws_bytes);
        const float fused = fastest(lt, op, a, b, d_row, A, B, C, 1.0f, ws, ws_bytes);
        // The same without the bias epilogue, and with every matrix in row order (W [cout, cin], x [L, cin]
        // read transposed).
        cublasLtMatmulDesc_t plain;
        CK(cublasLtMatmulDescCreate(&plain, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        CK(cublasLtMatmulDescSetAttribute(plain, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
        CK(cublasLtMatmulDescSetAttribute(plain, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n));
        const float no_bias = fastest(lt, plain, a, b, d_row, A, B, C, 1.0f, ws, ws_bytes);
        cublasLtMatmulDesc_t rows;
        CK(cublasLtMatmulDescCreate(&rows, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        CK(cublasLtMatmulDescSetAttribute(rows, CUBLASLT_MATMUL_DESC_TRANSA, &n, sizeof n));
        CK(cublasLtMatmulDescSetAttribute(rows, CUBLASLT_MATMUL_DESC_TRANSB, &t, sizeof t));
        CK(cublasLtMatmulDescSetAttribute(rows, CUBLASLT_MATMUL_DESC_EPILOGUE, &bias_epilogue, sizeof bias_epilogue));
        CK(cublasLtMatmulDescSetAttribute(rows, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
        cublasLtMatrixLayout_t a_row = layout(C_, C_, C_, true, 0);                  // W [cout, cin]
        cublasLtMatrixLayout_t b_row = layout(L, C_, C_, true, int64_t(L) * C_);     // x_b [L, cin]
        const float all_rows = fastest(lt, rows, a_row, b_row, d_row, A, B, C, 1.0f, ws, ws_bytes);
        std::printf("%5d x %4d: %.4f | %.4f (no bias %.4f; all in row order %.4f)\n", L, C_, today, fused, no_bias,
                    all_rows);
        for (auto l : {a, b, d_col, d_row, a_row, b_row}) cublasLtMatrixLayoutDestroy(l);
        for (auto d : {op, plain, rows}) cublasLtMatmulDescDestroy(d);
    }
    return 0;
}
