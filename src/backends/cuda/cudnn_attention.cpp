#include "backends/cuda/cudnn_attention.h"

#include "kiln/error.h"

#if KILN_HAS_CUDNN  // the whole file: CMake defines it where cuDNN is found
#include <cudnn.h>

#include <cmath>
#include <map>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cudnn_graph_api.h"
#include "backends/cuda/dependent_launch.h"

namespace kiln::cuda {

namespace {

constexpr int64_t kAlignment = 16;  // bytes; the tensors say so, so every pointer given must be aligned
constexpr int kCandidates = 4;      // engine configurations timed on a shape's first call
constexpr int kTimedRuns = 3;
enum : int64_t { kQ = 1, kK = 2, kV = 3, kO = 4, kScale = 5 };  // the tensors' unique ids in the graph

// A [b, heads, tokens, d] view (cuDNN's dimension order for attention) of rows `stride` elements apart with the
// heads side by side in each row.
Desc rows(int64_t uid, int64_t b, int64_t heads, int64_t tokens, int64_t d, int64_t stride) {
    return tensor_desc(uid, CUDNN_DATA_HALF, {b, heads, tokens, d}, {tokens * stride, d, stride, 1}, kAlignment);
}

// The softmax's scale, a float passed by value at each execution.
Desc scalar(int64_t uid) { return tensor_desc(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, sizeof(float), true); }

}  // namespace

struct CudnnAttention::Impl {
    cudnnHandle_t handle = nullptr;
    struct Entry {
        bool found = false;
        std::string why;  // where not found: cuDNN's refusal
        float scale = 1.0f;
        CudnnPlan plan;
    };
    std::map<CudnnAttentionShape, Entry> plans;
    std::string refusal;  // why the last call that returned false did

    ~Impl() {
        plans.clear();
        if (handle) cudnnDestroy(handle);
    }

    void execute(cudnnBackendDescriptor_t plan, const void* q, const void* k, const void* v, void* out,
                 const float* scale, void* ws) {
        Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
        const int64_t uids[5] = {kQ, kK, kV, kO, kScale};
        void* ptrs[5] = {const_cast<void*>(q), const_cast<void*>(k), const_cast<void*>(v), out,
                         const_cast<float*>(scale)};
        pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 5, uids);
        pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 5, ptrs);
        pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
        pack.finalize();
        detail::note_untriggered_library_launch();
        KILN_CUDNN_CHECK(cudnnBackendExecute(handle, plan, pack.d));
    }

    // The shape's fastest engine, timed on these buffers (out is overwritten); found = false where there is none.
    void choose(Entry& e, const CudnnAttentionShape& s, const void* q, const void* k, const void* v, void* out,
                cudaStream_t stream, const std::function<void*(size_t)>& workspace) {
#if CUDNN_VERSION >= 91300
        Desc qd = rows(kQ, s.b, s.heads, s.lq, s.d, s.q_stride), kd = rows(kK, s.b, s.heads, s.lk, s.d, s.kv_stride),
             vd = rows(kV, s.b, s.heads, s.lk, s.d, s.kv_stride), od = rows(kO, s.b, s.heads, s.lq, s.d, s.heads * s.d),
             scale = scalar(kScale);
        Desc op(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR);
        op.set(CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &qd.d);
        op.set(CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &kd.d);
        op.set(CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &vd.d);
        op.set(CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &od.d);
        op.set(CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &scale.d);
        op.finalize();
        Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
        graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op.d);
        graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
        graph.finalize();
        e.scale = float(1.0 / std::sqrt(double(s.d)));
        e.found = choose_cudnn_plan(
            handle, graph, stream, kCandidates, kTimedRuns, [](cudnnBackendDescriptor_t) { return true; },
            [&](cudnnBackendDescriptor_t plan, void* ws) { execute(plan, q, k, v, out, &e.scale, ws); }, workspace,
            e.plan);
#else  // headers older than the fused operation: never an engine
        (void)s, (void)q, (void)k, (void)v, (void)out, (void)stream, (void)workspace;
        e.found = false;
#endif
    }
};

CudnnAttention::CudnnAttention() : impl_(std::make_unique<Impl>()) { KILN_CUDNN_CHECK(cudnnCreate(&impl_->handle)); }
CudnnAttention::~CudnnAttention() = default;

int64_t CudnnAttention::version() { return int64_t(cudnnGetVersion()); }

bool CudnnAttention::takes(const CudnnAttentionShape& s, const void* q, const void* k, const void* v,
                           const void* out) {
    for (const void* p : {q, k, v, out})
        if (reinterpret_cast<uintptr_t>(p) % kAlignment) return false;
    return s.d % 8 == 0 && s.q_stride % 8 == 0 && s.kv_stride % 8 == 0;  // rows of whole 16-byte groups only
}

bool CudnnAttention::available() { return CUDNN_VERSION >= 91300 && version() >= 91300; }

std::string CudnnAttention::last_refusal() const { return impl_->refusal; }

bool CudnnAttention::run(const CudnnAttentionShape& s, const void* q, const void* k, const void* v, void* out,
                         cudaStream_t stream, const std::function<void*(size_t)>& workspace) {
    if (!takes(s, q, k, v, out)) {
        impl_->refusal = "an operand is not 16-byte aligned, or the head dim or a token stride not a multiple of 8";
        return false;
    }
    KILN_CUDNN_CHECK(cudnnSetStream(impl_->handle, stream));
    auto it = impl_->plans.find(s);
    if (it == impl_->plans.end()) {
        cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
        KILN_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
        if (capturing != cudaStreamCaptureStatusNone) {
            impl_->refusal = "a new shape inside a stream capture (its engine is chosen by timing)";
            return false;
        }
        Impl::Entry e;
        try {
            impl_->choose(e, s, q, k, v, out, stream, workspace);
        } catch (const Error& err) {
            if (err.kind() == ErrorKind::OutOfMemory) throw;
            e.found = false;  // the library refused the graph (too old, or a shape it does not take)
            char detail[512] = {};
            cudnnGetLastErrorString(detail, sizeof detail);
            e.why = std::string(err.what()) + (detail[0] ? std::string(" (") + detail + ")" : std::string());
        }
        if (!e.found && e.why.empty()) e.why = "no engine configuration of cuDNN " + std::to_string(version()) +
                                                " finalized and ran for this shape";
        it = impl_->plans.emplace(s, std::move(e)).first;
    }
    Impl::Entry& e = it->second;
    if (!e.found) {
        impl_->refusal = e.why;
        return false;
    }
    impl_->execute(e.plan.plan.d, q, k, v, out, &e.scale,
                   e.plan.workspace ? workspace(size_t(e.plan.workspace)) : nullptr);
    return true;
}

}  // namespace kiln::cuda

#else  // built without cuDNN: the backend never makes one (cuda_backend.cpp)

namespace kiln::cuda {
struct CudnnAttention::Impl {};
CudnnAttention::CudnnAttention() { fail(ErrorKind::Unsupported, "kiln was built without cuDNN"); }
CudnnAttention::~CudnnAttention() = default;
int64_t CudnnAttention::version() { return 0; }
bool CudnnAttention::takes(const CudnnAttentionShape&, const void*, const void*, const void*, const void*) {
    return false;
}
bool CudnnAttention::available() { return false; }
std::string CudnnAttention::last_refusal() const { return "kiln was built without cuDNN"; }
bool CudnnAttention::run(const CudnnAttentionShape&, const void*, const void*, const void*, void*, cudaStream_t,
                         const std::function<void*(size_t)>&) {
    return false;
}
}  // namespace kiln::cuda

#endif  // KILN_HAS_CUDNN
