// Times work queued on a stream with two CUDA events, for the choices made by measuring on a shape's first
// call (the convolution route, cuDNN's engine). The events are destroyed however the caller's loop ends
// (a candidate may throw). Waits for the stream: never inside a stream capture.
#pragma once
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/gpu_runtime.h"

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

private:
    cudaEvent_t begin_ = nullptr, end_ = nullptr;
};

}  // namespace kiln::cuda
