#include "backends/cuda/cudnn_graph_conv.h"

#include "kiln/error.h"

#if KILN_HAS_CUDNN  // the whole file: CMake defines it where cuDNN is found
#include <cudnn.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cudnn_graph_api.h"

namespace kiln::cuda {

namespace {

constexpr int64_t kAlignment = 16;  // bytes; every pointer given must be aligned so
constexpr int kCandidates = 8;  // heuristic results timed on a shape's first call
constexpr int kTimedRuns = 3;
enum : int64_t { kX = 1, kW = 2, kY = 3 };  // the tensors' unique ids in the graph

// A channels-last tensor [n, c, h, w] (cuDNN counts dims in NCHW order; the strides make it NHWC).
Desc tensor(int64_t uid, DType type, int64_t n, int64_t c, int64_t h, int64_t w) {
    return tensor_desc(uid, cudnn_type(type), {n, c, h, w}, {h * w * c, 1, w * c, c}, kAlignment);
}

// Whether an engine's numerical notes allow it: float32 accumulation and a deterministic result always; no
// tensor cores for float32 unless TF32 is allowed.
bool acceptable(cudnnBackendDescriptor_t config, const ConvShape& s) {
    Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    int64_t got = 0;
    if (cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got,
                                 &engine.d) != CUDNN_STATUS_SUCCESS)
        return false;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t count = 0;
    if (cudnnBackendGetAttribute(engine.d, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &count, notes) != CUDNN_STATUS_SUCCESS)
        return false;
    for (int64_t i = 0; i < count; ++i) {
        if (notes[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION ||
            notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)
            return false;
        if (s.type == DType::F32 && !s.tf32 &&
            (notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE || notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS))
            return false;
    }
    return true;
}

}  // namespace

struct CudnnGraphConv::Impl {
    cudnnHandle_t handle = nullptr;
    using Plan = CudnnPlan;
    using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, bool>;
    std::map<Key, Plan> plans;

    ~Impl() {
        plans.clear();
        if (handle) cudnnDestroy(handle);
    }

    // Runs `plan` on the pointers (a variant pack per call: the pointers change from call to call).
    void execute(cudnnBackendDescriptor_t plan, const void* x, const void* w, void* y, void* ws) {
        Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
        const int64_t uids[3] = {kX, kW, kY};
        void* ptrs[3] = {const_cast<void*>(x), const_cast<void*>(w), y};
        pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
        pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs);
        pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
        pack.finalize();
        KILN_CUDNN_CHECK(cudnnBackendExecute(handle, plan, pack.d));
    }

    // The fastest acceptable engine for the shape, timed on these buffers (y is overwritten).
    Plan choose(const ConvShape& s, const void* x, const void* w, void* y, cudaStream_t stream,
                const std::function<void*(size_t)>& workspace) {
        Desc xd = tensor(kX, s.type, s.n, s.cin, s.h, s.w), wd = tensor(kW, s.type, s.cout, s.cin, s.k, s.k),
             yd = tensor(kY, s.type, s.n, s.cout, s.oh, s.ow);
        Desc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
        const cudnnDataType_t accumulate = CUDNN_DATA_FLOAT;
        const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
        const int64_t dims = 2, ones[2] = {1, 1}, stride[2] = {s.stride, s.stride}, pad[2] = {s.padding, s.padding};
        conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &accumulate);
        conv.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
        conv.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
        conv.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, ones);
        conv.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride);
        conv.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
        conv.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
        conv.finalize();
        Desc op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
        const float alpha = 1.0f, beta = 0.0f;
        op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xd.d);
        op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &wd.d);
        op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &yd.d);
        op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv.d);
        op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
        op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
        op.finalize();
        Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
        graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op.d);
        graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
        graph.finalize();
        CudnnPlan best;
        const bool found = choose_cudnn_plan(
            handle, graph, stream, kCandidates, kTimedRuns,
            [&s](cudnnBackendDescriptor_t config) { return acceptable(config, s); },
            [&](cudnnBackendDescriptor_t plan, void* ws) { execute(plan, x, w, y, ws); }, workspace, best);
        require(found, ErrorKind::Unsupported,
                "cuDNN has no channels-last engine for this convolution (" + std::to_string(s.cin) + " -> " +
                    std::to_string(s.cout) + " channels, " + std::to_string(s.h) + "x" + std::to_string(s.w) + ")");
        return best;
    }
};

CudnnGraphConv::CudnnGraphConv() : impl_(std::make_unique<Impl>()) { KILN_CUDNN_CHECK(cudnnCreate(&impl_->handle)); }
CudnnGraphConv::~CudnnGraphConv() = default;

void CudnnGraphConv::run(const ConvShape& s, const void* x, const void* w, void* y, cudaStream_t stream,
                         const std::function<void*(size_t)>& workspace) {
    for (const void* p : {x, w, static_cast<const void*>(y)})
        require(reinterpret_cast<uintptr_t>(p) % kAlignment == 0, ErrorKind::Unsupported,
                "cuDNN channels-last convolution: an operand is not 16-byte aligned");
    KILN_CUDNN_CHECK(cudnnSetStream(impl_->handle, stream));
    const Impl::Key key{s.n, s.cin, s.h, s.w, s.cout, s.k, s.stride, s.padding, int(s.type), s.tf32};
    auto it = impl_->plans.find(key);
    if (it == impl_->plans.end()) {
        cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
        KILN_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
        require(capturing == cudaStreamCaptureStatusNone, ErrorKind::Unsupported,
                "cuDNN channels-last convolution: a new shape inside a recording (its engine is chosen by timing)");
        it = impl_->plans.emplace(key, impl_->choose(s, x, w, y, stream, workspace)).first;
    }
    const Impl::Plan& p = it->second;
    impl_->execute(p.plan.d, x, w, y, p.workspace ? workspace(size_t(p.workspace)) : nullptr);
}

}  // namespace kiln::cuda

#else  // built without cuDNN: the backend never makes one (cuda_backend.cpp)

namespace kiln::cuda {
struct CudnnGraphConv::Impl {};
CudnnGraphConv::CudnnGraphConv() { fail(ErrorKind::Unsupported, "kiln was built without cuDNN"); }
CudnnGraphConv::~CudnnGraphConv() = default;
void CudnnGraphConv::run(const ConvShape&, const void*, const void*, void*, cudaStream_t,
                         const std::function<void*(size_t)>&) {
    fail(ErrorKind::Unsupported, "kiln was built without cuDNN");
}
}  // namespace kiln::cuda

#endif  // KILN_HAS_CUDNN
