#if KILN_HAS_CUDNN  // the whole file: CMake defines it where cuDNN is found
#include "backends/cuda/cudnn_graph_api.h"

#include <vector>

#include "backends/cuda/event_timer.h"
#include "kiln/error.h"

namespace kiln::cuda {

Desc tensor_desc(int64_t uid, cudnnDataType_t type, const int64_t (&dims)[4], const int64_t (&strides)[4],
                 int64_t alignment, bool by_value) {
    Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
    t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    if (by_value) t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    t.finalize();
    return t;
}

bool choose_cudnn_plan(cudnnHandle_t handle, const Desc& graph, cudaStream_t stream, int candidates, int timed_runs,
                       const std::function<bool(cudnnBackendDescriptor_t config)>& acceptable,
                       const std::function<void(cudnnBackendDescriptor_t plan, void* workspace)>& run,
                       const std::function<void*(size_t)>& workspace, CudnnPlan& best) {
    Desc heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    const cudnnBackendHeurMode_t heur_mode = CUDNN_HEUR_MODE_A;
    heuristics.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph.d);
    heuristics.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &heur_mode);
    heuristics.finalize();
    int64_t available = 0;
    KILN_CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.d, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &available, nullptr));
    std::vector<Desc> configs;
    for (int64_t i = 0; i < available; ++i) configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    std::vector<cudnnBackendDescriptor_t> raw;
    for (Desc& c : configs) raw.push_back(c.d);
    int64_t got = 0;
    if (available > 0)
        KILN_CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.d, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, available, &got, raw.data()));
    EventTimer timer;
    // One workspace for all candidates, grown to the largest asked for: not one of up to 512 MiB each.
    void* ws = nullptr;
    int64_t ws_bytes = 0;
    float best_ms = -1.0f;
    int tried = 0;
    for (int64_t i = 0; i < got && tried < candidates; ++i) {
        if (!acceptable(raw[i])) continue;
        CudnnPlan p;
        p.plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
        p.plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw[i]);
        if (cudnnBackendFinalize(p.plan.d) != CUDNN_STATUS_SUCCESS) continue;  // not for this graph after all
        int64_t n = 0;
        KILN_CUDNN_CHECK(cudnnBackendGetAttribute(p.plan.d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                  CUDNN_TYPE_INT64, 1, &n, &p.workspace));
        if (p.workspace < 0 || size_t(p.workspace) > kCudnnMaxWorkspace) continue;
        ++tried;
        if (p.workspace > ws_bytes) {
            try {
                ws = workspace(size_t(p.workspace));
            } catch (const Error& e) {
                if (e.kind() != ErrorKind::OutOfMemory) throw;
                continue;  // more than a --vram cap leaves: an engine that needs less may still do
            }
            ws_bytes = p.workspace;
        }
        float ms = 0.0f;
        try {
            run(p.plan.d, ws);  // the first run may load the kernel
            ms = timer.graph_mean_ms(stream, timed_runs, [&] { run(p.plan.d, ws); });
        } catch (const Error& e) {
            if (e.kind() == ErrorKind::OutOfMemory) throw;
            continue;  // this engine refuses the call: try the next
        }
        if (best_ms < 0.0f || ms < best_ms) {
            best_ms = ms;
            best = std::move(p);
        }
    }
    return best_ms >= 0.0f;
}

}  // namespace kiln::cuda

#endif  // KILN_HAS_CUDNN
