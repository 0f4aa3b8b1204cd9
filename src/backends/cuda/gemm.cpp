#include "backends/cuda/gemm.h"

#include <cublasLt.h>

#include <cstring>
#include <map>
#include <string>
#include <tuple>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/dependent_launch.h"
#include "backends/cuda/event_timer.h"
#include "kiln/error.h"

namespace kiln::cuda {

namespace {

void check_lt(cublasStatus_t s, const char* call) {
    if (s != CUBLAS_STATUS_SUCCESS)
        throw Error(s == CUBLAS_STATUS_ALLOC_FAILED ? ErrorKind::OutOfMemory : ErrorKind::Unsupported,
                    std::string(call) + " failed: cuBLAS status " + std::to_string(static_cast<int>(s)));
}
#define KILN_LT_CHECK(call) check_lt((call), #call)

cudaDataType_t cuda_type(DType t) {
    switch (t) {
        case DType::F16: return CUDA_R_16F;
        case DType::BF16: return CUDA_R_16BF;
        default: return CUDA_R_32F;
    }
}

// The largest power of two (up to 256) dividing the address: cuBLASLt picks kernels by it.
uint32_t alignment(const void* p) {
    const auto v = reinterpret_cast<uintptr_t>(p);
    uint32_t a = 256;
    while (a > 1 && v % a) a /= 2;
    return a;
}

constexpr size_t kWorkspaceBytes = size_t(32) << 20;
// Heuristic candidates timed on a shape's first product (outside stream capture): cuBLASLt's first choice
// was not its fastest at SD's shapes (small inner sizes, 320 to 1280).
constexpr int kAlgoCandidates = 8;
constexpr int kAlgoRuns = 3;


}  // namespace

struct Gemm::Impl {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int, int64_t,
                           int64_t, int64_t, uint32_t, uint32_t, uint32_t, bool, bool, bool>;
    struct Plan {
        cublasLtMatmulDesc_t op = nullptr;
        cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
        cublasLtMatmulAlgo_t algo{};
    };
    std::map<Key, Plan> plans;

    static void destroy(Plan& p) {
        cublasLtMatrixLayoutDestroy(p.a);
        cublasLtMatrixLayoutDestroy(p.b);
        cublasLtMatrixLayoutDestroy(p.c);
        cublasLtMatmulDescDestroy(p.op);
    }

    ~Impl() {
        for (auto& [k, p] : plans) destroy(p);
        if (workspace) cudaFree(workspace);
        if (handle) cublasLtDestroy(handle);
    }

    static cublasLtMatrixLayout_t layout(DType t, int64_t rows, int64_t cols, int64_t ld, int batch, int64_t stride) {
        cublasLtMatrixLayout_t l = nullptr;
        KILN_LT_CHECK(cublasLtMatrixLayoutCreate(&l, cuda_type(t), uint64_t(rows), uint64_t(cols), ld));
        if (batch > 1) {
            int32_t count = batch;
            KILN_LT_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
            KILN_LT_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                           sizeof stride));
        }
        return l;
    }

    // The fastest of the heuristic's candidates for g (the first where the stream is being captured, or only
    // one was offered), each timed over kAlgoRuns products into a scratch D, replayed as a graph (where some
    // algorithms' memsets cost most): C (an accumulator with beta 1) is left as it was.
    cublasLtMatmulAlgo_t fastest(const Plan& p, const GemmArgs& g, const cublasLtMatmulHeuristicResult_t* results,
                                 int found, cudaStream_t stream) {
        cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        KILN_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
        if (found <= 1 || capture != cudaStreamCaptureStatusNone) return results[0].algo;
        const size_t c_bytes =
            size_t((g.batch - 1) * g.stride_c + g.ldc * (g.n - 1) + g.m) * dtype_size(g.c_type);
        void* scratch = nullptr;
        if (cudaMalloc(&scratch, c_bytes) != cudaSuccess) {
            (void)cudaGetLastError();
            return results[0].algo;  // no room to time them: the heuristic's choice
        }
        if (g.bias)
            KILN_LT_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias));
        int best = 0;
        float best_ms = -1.0f;
        try {
            EventTimer timer;
            for (int i = 0; i < found; ++i) {
                auto product = [&] {
                    return cublasLtMatmul(handle, p.op, &g.alpha, g.a, p.a, g.b, p.b, &g.beta, g.c, p.c, scratch, p.c,
                                          &results[i].algo, workspace, kWorkspaceBytes, stream);
                };
                if (product() != CUBLAS_STATUS_SUCCESS) continue;  // a candidate that cannot run this product
                const float ms = timer.graph_mean_ms(stream, kAlgoRuns, [&] { KILN_LT_CHECK(product()); });
                if (best_ms < 0.0f || ms < best_ms) best_ms = ms, best = i;
            }
        } catch (...) {
            (void)cudaFree(scratch);
            throw;
        }
        KILN_CUDA_CHECK(cudaFree(scratch));
        return results[best].algo;
    }

    Plan& plan_for(const GemmArgs& g, cudaStream_t stream) {
        const uint32_t al_a = alignment(g.a), al_b = alignment(g.b), al_c = alignment(g.c);
        const Key key{g.trans_a, g.trans_b, g.m, g.n, g.k, g.lda, g.ldb, g.ldc, int(g.ab_type), int(g.c_type),
                      g.batch, g.stride_a, g.stride_b, g.stride_c, al_a, al_b, al_c, g.beta != 0.0f, g.tf32,
                      g.bias != nullptr};
        auto it = plans.find(key);
        if (it != plans.end()) return it->second;
        Plan p;
        const bool tf32 = g.tf32 && g.ab_type == DType::F32;
        KILN_LT_CHECK(cublasLtMatmulDescCreate(&p.op, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
        const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
        KILN_LT_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
        KILN_LT_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
        if (g.bias) {  // the algorithm must be chosen with the epilogue; the pointer is set at each call (run)
            const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
            KILN_LT_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
        }
        // Stored shapes: op(A) is m x k, so A is k x m when transposed.
        p.a = layout(g.ab_type, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda, g.batch, g.stride_a);
        p.b = layout(g.ab_type, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb, g.batch, g.stride_b);
        p.c = layout(g.c_type, g.m, g.n, g.ldc, g.batch, g.stride_c);
        cublasLtMatmulPreference_t pref = nullptr;
        KILN_LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
        const uint64_t ws = kWorkspaceBytes;
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c);
        cublasLtMatmulHeuristicResult_t results[kAlgoCandidates]{};
        int found = 0;
        const cublasStatus_t s =
            cublasLtMatmulAlgoGetHeuristic(handle, p.op, p.a, p.b, p.c, p.c, pref, kAlgoCandidates, results, &found);
        cublasLtMatmulPreferenceDestroy(pref);
        if (s != CUBLAS_STATUS_SUCCESS || found == 0) {
            destroy(p);
            fail(ErrorKind::Unsupported, "cuBLASLt has no algorithm for a " + std::to_string(g.m) + "x" +
                                             std::to_string(g.n) + "x" + std::to_string(g.k) + " product of " +
                                             dtype_name(g.ab_type) + " (status " + std::to_string(int(s)) + ")");
        }
        try {
            p.algo = fastest(p, g, results, found, stream);
        } catch (...) {
            destroy(p);
            throw;
        }
        return plans.emplace(key, p).first->second;
    }
};

Gemm::Gemm() : impl_(std::make_unique<Impl>()) {
    KILN_LT_CHECK(cublasLtCreate(&impl_->handle));
    KILN_CUDA_CHECK(cudaMalloc(&impl_->workspace, kWorkspaceBytes));
}

Gemm::~Gemm() = default;

void Gemm::run(const GemmArgs& g, cudaStream_t stream) {
    if (g.m == 0 || g.n == 0 || g.batch == 0) return;
    require(g.k > 0, ErrorKind::InvalidArgument, "gemm: k must be > 0");
    require(!g.bias || g.batch == 1, ErrorKind::InvalidArgument, "gemm: a bias with batched products");
    Impl::Plan& p = impl_->plan_for(g, stream);
    if (g.bias)
        KILN_LT_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias));
    detail::note_untriggered_library_launch();
    KILN_LT_CHECK(cublasLtMatmul(impl_->handle, p.op, &g.alpha, g.a, p.a, g.b, p.b, &g.beta, g.c, p.c, g.c, p.c,
                                 &p.algo, impl_->workspace, kWorkspaceBytes, stream));
}

}  // namespace kiln::cuda
