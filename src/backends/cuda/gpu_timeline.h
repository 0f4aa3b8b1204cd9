// GPU time per op on the CUDA backend, for a profiler (ops/op_observer.h): while one wants device spans, each
// op records a start and an end event on the backend's stream around its kernels. Nothing waits for the GPU
// because of it: the events are read back (ops/device_spans.h) where the host waits anyway (a download,
// synchronize()), and reported then. Free when no profiler is attached: ops check one pointer, and a sync
// point one flag.
//
// Events come from a pool that is reused across ops (kPoolEvents; made on first use). When it runs out
// between ops, the timeline waits for the stream once and reads the pool back, the only wait it adds.
//
// CUDA graphs: events recorded while a call is captured become event-record nodes of the graph
// (cudaEventRecordWithFlags with cudaEventRecordExternal, which NVIDIA documents for this), so every replay
// records them again and each op of a replayed call gets its own GPU span. Those events belong to the
// recording (GraphSpans), not to the pool. A replay queued while the previous replay's events are still
// unread waits for the stream first, since the replay overwrites them.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/gpu_runtime.h"
#include "ops/device_spans.h"
#include "ops/op_list.h"

namespace kiln::cuda {

class GpuTimeline {
public:
    static constexpr size_t kPoolEvents = 4096;  // 2048 op calls between waits (an SD 1.5 UNet call has ~700)

    // The events and op calls captured into one graph; destroyed with the recording (and after its last
    // replay's spans have been read).
    class GraphSpans;

    GpuTimeline(cudaStream_t stream, std::string device);  // device: "cuda:0", as profiles name it
    ~GpuTimeline();
    GpuTimeline(const GpuTimeline&) = delete;
    GpuTimeline& operator=(const GpuTimeline&) = delete;

    // Around one op's kernels, when ops::device_spans_wanted(). begin() takes both events (it may wait for
    // the stream: on the first op, to anchor the clock, and when the pool is empty); end() only records.
    void begin(ops::OpKind kind, double flops);
    void end() noexcept;

    // The host has just waited for the stream: read back the finished spans, report them, re-anchor.
    void synchronized();

    // Stream capture of a recorded call: ops between begin_capture() and end_capture() put event-record
    // nodes into the graph. end_capture() returns null when no op was timed; abort_capture() drops them.
    void begin_capture();
    std::shared_ptr<GraphSpans> end_capture();
    void abort_capture() noexcept;
    // Before each launch of the graph: queues its spans to be read at the next wait.
    void before_replay(const std::shared_ptr<GraphSpans>& spans);

private:
    struct Call {
        ops::OpKind kind = ops::OpKind::Linear;
        int depth = 0, parent = -1;  // parent: index in the same list
        double flops = 0;
        cudaEvent_t start = nullptr, end = nullptr;
        bool pooled = false;  // events to give back to the pool once read
    };
    friend class GraphSpans;

    cudaEvent_t take_event();
    void wait_and_resolve();
    void resolve();
    void ensure_anchor();
    void set_anchor();

    cudaStream_t stream_;
    std::string device_;
    std::vector<cudaEvent_t> free_;   // the pool's unused events
    size_t pool_size_ = 0;            // events the pool has made
    std::vector<Call> pending_;       // recorded, not read back yet, in stream order
    std::vector<int> open_;           // calls begun and not ended, innermost last (indices in the active list)
    std::vector<std::shared_ptr<GraphSpans>> queued_graphs_;  // replays whose spans are in pending_
    std::shared_ptr<GraphSpans> capture_;  // while a call is captured
    cudaEvent_t anchor_ = nullptr;
    bool anchored_ = false;
    int64_t anchor_ns_ = 0;  // steady_clock time of anchor_
};

class GpuTimeline::GraphSpans {
public:
    GraphSpans() = default;
    ~GraphSpans();
    GraphSpans(const GraphSpans&) = delete;
    GraphSpans& operator=(const GraphSpans&) = delete;
    size_t calls() const { return calls_.size(); }

private:
    friend class GpuTimeline;
    std::vector<cudaEvent_t> events_;
    std::vector<Call> calls_;
    bool queued_ = false;  // a replay's spans are waiting to be read
};

}  // namespace kiln::cuda
