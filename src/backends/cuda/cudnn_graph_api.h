// What kiln's two users of cuDNN's graph (backend) API share: the channels-last convolution
// (cudnn_graph_conv.cpp) and fused attention (cudnn_attention.cpp). A descriptor owned by its C++ object, and
// the engine choice both make: heuristic mode A's candidates for a finalized operation graph, each finalized
// into an execution plan and timed on the call's own buffers, the fastest kept. Included only where CMake found
// cuDNN (KILN_HAS_CUDNN).
#pragma once
#include <cudnn.h>

#include <cstdint>
#include <functional>
#include <utility>

#include "backends/cuda/cudnn_check.h"
#include "backends/cuda/gpu_runtime.h"

namespace kiln::cuda {

// One backend descriptor, destroyed with its owner.
struct Desc {
    cudnnBackendDescriptor_t d = nullptr;
    explicit Desc(cudnnBackendDescriptorType_t type) { KILN_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d)); }
    ~Desc() {
        if (d) cudnnBackendDestroyDescriptor(d);
    }
    Desc(Desc&& o) noexcept : d(o.d) { o.d = nullptr; }
    Desc& operator=(Desc&& o) noexcept {
        std::swap(d, o.d);
        return *this;
    }
    Desc(const Desc&) = delete;
    Desc& operator=(const Desc&) = delete;
    template <class V>
    void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const V* values) {
        KILN_CUDNN_CHECK(cudnnBackendSetAttribute(d, name, type, count, values));
    }
    void finalize() { KILN_CUDNN_CHECK(cudnnBackendFinalize(d)); }
};

// A finalized 4-D tensor descriptor: dims in cuDNN's order, strides in elements, pointers aligned to `alignment`
// bytes; by_value: a host scalar passed at each execution (a variant pack entry pointing at host memory).
Desc tensor_desc(int64_t uid, cudnnDataType_t type, const int64_t (&dims)[4], const int64_t (&strides)[4],
                 int64_t alignment, bool by_value = false);

// An execution plan and the device scratch it needs.
struct CudnnPlan {
    Desc plan{CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR};
    int64_t workspace = 0;
};

constexpr size_t kCudnnMaxWorkspace = size_t(512) << 20;

// The fastest plan for the finalized operation `graph` among heuristic mode A's first `candidates` engine
// configurations that `acceptable` allows and that finalize for it with at most kCudnnMaxWorkspace of scratch.
// `run(plan, workspace)` queues one execution; each candidate runs once (loading its kernel), then `timed_runs`
// times captured into a graph and replayed between events on `stream` (EventTimer::graph_mean_ms). A candidate
// whose run throws (other than OutOfMemory) is skipped.
// `workspace(bytes)` gives device scratch alive until the stream's queued work is done. Returns false, with
// `best` untouched, when no candidate works.
bool choose_cudnn_plan(cudnnHandle_t handle, const Desc& graph, cudaStream_t stream, int candidates, int timed_runs,
                       const std::function<bool(cudnnBackendDescriptor_t config)>& acceptable,
                       const std::function<void(cudnnBackendDescriptor_t plan, void* workspace)>& run,
                       const std::function<void*(size_t)>& workspace, CudnnPlan& best);

}  // namespace kiln::cuda
