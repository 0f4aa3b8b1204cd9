#include "backends/cuda/cudnn_conv.h"

#include "kiln/error.h"

#if KILN_HAS_CUDNN  // the whole file: CMake defines it where cuDNN is found
#include <cudnn.h>

#include <map>
#include <string>
#include <tuple>

#include "backends/cuda/cudnn_check.h"
#include "kiln/error.h"

// The legacy convolution API is deprecated in cuDNN 9 in favour of the graph API, but it is the short route
// to cuDNN's convolution kernels; the warnings say nothing we do not know.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace kiln::cuda {

namespace {

constexpr size_t kMaxWorkspace = size_t(512) << 20;

}  // namespace

struct CudnnConv::Impl {
    cudnnHandle_t handle = nullptr;
    struct Plan {
        cudnnTensorDescriptor_t x = nullptr, y = nullptr;
        cudnnFilterDescriptor_t w = nullptr;
        cudnnConvolutionDescriptor_t conv = nullptr;
        cudnnConvolutionFwdAlgo_t algo{};
        size_t workspace = 0;
    };
    using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, bool>;
    std::map<Key, Plan> plans;

    ~Impl() {
        for (auto& [k, p] : plans) {
            cudnnDestroyTensorDescriptor(p.x);
            cudnnDestroyTensorDescriptor(p.y);
            cudnnDestroyFilterDescriptor(p.w);
            cudnnDestroyConvolutionDescriptor(p.conv);
        }
        if (handle) cudnnDestroy(handle);
    }
};

CudnnConv::CudnnConv() : impl_(std::make_unique<Impl>()) { KILN_CUDNN_CHECK(cudnnCreate(&impl_->handle)); }
CudnnConv::~CudnnConv() = default;

void CudnnConv::run(const ConvShape& s, const void* x, const void* w, void* y, cudaStream_t stream,
                    const std::function<void*(size_t)>& workspace) {
    KILN_CUDNN_CHECK(cudnnSetStream(impl_->handle, stream));
    const Impl::Key key{s.n, s.cin, s.h, s.w, s.cout, s.k, s.stride, s.padding, int(s.type), s.tf32};
    auto it = impl_->plans.find(key);
    if (it == impl_->plans.end()) {
        Impl::Plan p;
        const cudnnDataType_t t = cudnn_type(s.type);
        KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.x));
        KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.y));
        KILN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&p.w));
        KILN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p.conv));
        KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NCHW, t, int(s.n), int(s.cin), int(s.h), int(s.w)));
        KILN_CUDNN_CHECK(
            cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NCHW, t, int(s.n), int(s.cout), int(s.oh), int(s.ow)));
        KILN_CUDNN_CHECK(cudnnSetFilter4dDescriptor(p.w, t, CUDNN_TENSOR_NCHW, int(s.cout), int(s.cin), int(s.k), int(s.k)));
        KILN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p.conv, int(s.padding), int(s.padding), int(s.stride),
                                                         int(s.stride), 1, 1, CUDNN_CROSS_CORRELATION,
                                                         CUDNN_DATA_FLOAT));  // float32 accumulation
        const cudnnMathType_t math = s.type != DType::F32 ? CUDNN_TENSOR_OP_MATH
                                     : s.tf32             ? CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
                                                          : CUDNN_FMA_MATH;
        KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, math));
        // cuDNN times its algorithms on these very buffers (y is overwritten; it is an output anyway).
        cudnnConvolutionFwdAlgoPerf_t perf[8];
        int found = 0;
        // Under a --vram cap the search may not get its 512 MiB: then it chooses among the algorithms that need
        // 32 MiB, or none.
        size_t ws_bytes = kMaxWorkspace;
        void* ws = nullptr;
        for (;;) {
            try {
                ws = ws_bytes ? workspace(ws_bytes) : nullptr;
                break;
            } catch (const Error& e) {
                if (e.kind() != ErrorKind::OutOfMemory || ws_bytes == 0) throw;
                ws_bytes = ws_bytes > (size_t(32) << 20) ? size_t(32) << 20 : 0;
            }
        }
        KILN_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(impl_->handle, p.x, x, p.w, w, p.conv, p.y, y, 8,
                                                                &found, perf, ws, ws_bytes));
        int pick = -1;
        for (int i = 0; i < found && pick < 0; ++i)
            if (perf[i].status == CUDNN_STATUS_SUCCESS &&
                (s.type != DType::F32 || s.tf32 || perf[i].mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
                pick = i;
        require(pick >= 0, ErrorKind::Unsupported, "cuDNN has no convolution algorithm for this shape");
        p.algo = perf[pick].algo;
        p.workspace = perf[pick].memory;
        KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, perf[pick].mathType));
        it = impl_->plans.emplace(key, p).first;
    }
    const Impl::Plan& p = it->second;
    const float one = 1.0f, zero = 0.0f;
    void* ws = p.workspace ? workspace(p.workspace) : nullptr;
    KILN_CUDNN_CHECK(cudnnConvolutionForward(impl_->handle, &one, p.x, x, p.w, w, p.conv, p.algo, ws, p.workspace,
                                             &zero, p.y, y));
}

}  // namespace kiln::cuda

#else  // built without cuDNN: the backend never makes one (cuda_backend.cpp)

namespace kiln::cuda {
struct CudnnConv::Impl {};
CudnnConv::CudnnConv() { fail(ErrorKind::Unsupported, "kiln was built without cuDNN"); }
CudnnConv::~CudnnConv() = default;
void CudnnConv::run(const ConvShape&, const void*, const void*, void*, cudaStream_t,
                    const std::function<void*(size_t)>&) {
    fail(ErrorKind::Unsupported, "kiln was built without cuDNN");
}
}  // namespace kiln::cuda

#endif  // KILN_HAS_CUDNN
