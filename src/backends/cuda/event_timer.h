// Times work queued on a stream with two CUDA events, for the choices made by measuring on a shape's first
// call (the convolution route, cuDNN's engine, cuBLASLt's algorithm). The events are destroyed however the
// caller's loop ends (a candidate may throw). Waits for the stream: never inside a stream capture.
#pragma once
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/gpu_runtime.h"
#if !defined(KILN_HIP)
#include "backends/cuda/graph_memset_nodes.h"
#endif

namespace kiln::cuda {

class EventTimer {
public:
    EventTimer() {
        KILN_CUDA_CHECK(cudaEventCreate(&begin_));
        try {
            KILN_CUDA_CHECK(cudaEventCreate(&end_));
        } catch (...) {
            (void)cudaEventDestroy(begin_);
            throw;
        }
    }
    ~EventTimer() {
        (void)cudaEventDestroy(begin_);
        (void)cudaEventDestroy(end_);
    }
    EventTimer(const EventTimer&) = delete;
    EventTimer& operator=(const EventTimer&) = delete;

    void start(cudaStream_t s) { KILN_CUDA_CHECK(cudaEventRecord(begin_, s)); }
    // Milliseconds from start() to now on the stream, once the work between has run.
    float stop_ms(cudaStream_t s) {
        KILN_CUDA_CHECK(cudaEventRecord(end_, s));
        KILN_CUDA_CHECK(cudaEventSynchronize(end_));
        float ms = 0.0f;
        KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, begin_, end_));
        return ms;
    }

    // Mean milliseconds of `runs` runs of f() queued between the events (warm f up first where that matters).
    template <class F>
    float mean_ms(cudaStream_t s, int runs, F&& f) {
        start(s);
        for (int r = 0; r < runs; ++r) f();
        return stop_ms(s) / float(runs);
    }

    // Mean milliseconds of `runs` runs of f() as they run in a recorded call: captured into a CUDA graph that is
    // replayed kReplays times between the events. A library's memsets are nodes of their own there and cost
    // far more than on a stream (session 11, SD 1.5's UNet graph on the H200: about 5 us each, where one kernel
    // follows another after 0.5 us), so a choice between candidates must see them. One replay varied enough
    // to change choices between processes (the UNet call at 5.8 or 6.1 ms); the fastest of three replays
    // chose worse than their mean (0.7% slower), as a recording runs again and again. Where the stream cannot
    // be captured (the legacy stream, HIP builds), mean_ms.
    template <class F>
    float graph_mean_ms(cudaStream_t s, int runs, F&& f) {
#if defined(KILN_HIP)
        return mean_ms(s, runs, f);
#else
        if (!s || cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
            (void)cudaGetLastError();
            return mean_ms(s, runs, f);
        }
        cudaGraph_t graph = nullptr;
        try {
            for (int r = 0; r < runs; ++r) f();
        } catch (...) {
            if (cudaStreamEndCapture(s, &graph) == cudaSuccess && graph) (void)cudaGraphDestroy(graph);
            (void)cudaGetLastError();
            throw;
        }
        // A library call that cannot be captured ends the capture with an error: time it on the stream then.
        if (cudaStreamEndCapture(s, &graph) != cudaSuccess || !graph) {
            (void)cudaGetLastError();
            return mean_ms(s, runs, f);
        }
        cudaGraphExec_t exec = nullptr;
        cudaError_t made = cudaSuccess;
        try {
            memset_nodes_to_kernels(graph);  // as the backend's recordings have them
            made = cudaGraphInstantiate(&exec, graph, 0);
        } catch (...) {
            (void)cudaGraphDestroy(graph);
            throw;
        }
        (void)cudaGraphDestroy(graph);
        if (made != cudaSuccess) {
            (void)cudaGetLastError();
            return mean_ms(s, runs, f);
        }
        try {
            KILN_CUDA_CHECK(cudaGraphLaunch(exec, s));  // the first launch uploads the graph: not timed
            start(s);
            for (int replay = 0; replay < kReplays; ++replay) KILN_CUDA_CHECK(cudaGraphLaunch(exec, s));
            const float ms = stop_ms(s);
            (void)cudaGraphExecDestroy(exec);
            return ms / float(kReplays * runs);
        } catch (...) {
            (void)cudaGraphExecDestroy(exec);
            throw;
        }
#endif
    }

    static constexpr int kReplays = 3;

private:
    cudaEvent_t begin_ = nullptr, end_ = nullptr;
};

}  // namespace kiln::cuda
