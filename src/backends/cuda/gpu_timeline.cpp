#include "backends/cuda/gpu_timeline.h"

#include <chrono>

#include "backends/cuda/cuda_check.h"
#include "ops/op_observer.h"

namespace kiln::cuda {

namespace {

int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// Milliseconds from a to b, or false (and the runtime's last error cleared, so that a later launch check does
// not report it) when one of them was not recorded or has not completed.
bool elapsed_ms(cudaEvent_t a, cudaEvent_t b, double* ms) {
    float v = 0;
    if (cudaEventElapsedTime(&v, a, b) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    *ms = v;
    return true;
}

}  // namespace

GpuTimeline::GraphSpans::~GraphSpans() {
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
}

GpuTimeline::GpuTimeline(cudaStream_t stream, std::string device) : stream_(stream), device_(std::move(device)) {}

GpuTimeline::~GpuTimeline() {
    // The backend waited for its stream before destroying this; unread spans are dropped.
    for (const Call& c : pending_)
        if (c.pooled) {
            free_.push_back(c.start);
            free_.push_back(c.end);
        }
    for (cudaEvent_t e : free_) (void)cudaEventDestroy(e);
    if (anchor_) (void)cudaEventDestroy(anchor_);
}

cudaEvent_t GpuTimeline::take_event() {
    if (free_.empty()) {
        // Read the pool back rather than grow it, unless an op is open (its start event is pending): then grow,
        // which only nested ops (a handful) can make happen.
        if (pool_size_ >= kPoolEvents && open_.empty()) wait_and_resolve();
        if (free_.empty()) {
            cudaEvent_t e = nullptr;
            KILN_CUDA_CHECK(cudaEventCreate(&e));
            ++pool_size_;
            return e;
        }
    }
    cudaEvent_t e = free_.back();
    free_.pop_back();
    return e;
}

void GpuTimeline::begin(ops::OpKind kind, double flops) {
    Call c;
    c.kind = kind;
    c.depth = static_cast<int>(open_.size());
    c.parent = open_.empty() ? -1 : open_.back();
    c.flops = flops;
    if (capture_) {
        // Owned by the graph: every replay records these again.
        for (cudaEvent_t* e : {&c.start, &c.end}) {
            KILN_CUDA_CHECK(cudaEventCreate(e));
            capture_->events_.push_back(*e);
        }
#if defined(KILN_HIP)
        // HIP builds do not capture graphs (cuda_backend.cpp is not compiled for HIP); ROCm cannot time events
        // inside graphs either.
        KILN_CUDA_CHECK(cudaEventRecord(c.start, stream_));
#else
        KILN_CUDA_CHECK(cudaEventRecordWithFlags(c.start, stream_, cudaEventRecordExternal));
#endif
        capture_->calls_.push_back(c);
        open_.push_back(static_cast<int>(capture_->calls_.size() - 1));
        return;
    }
    ensure_anchor();
    c.start = take_event();
    c.end = take_event();
    c.pooled = true;
    KILN_CUDA_CHECK(cudaEventRecord(c.start, stream_));
    pending_.push_back(c);
    open_.push_back(static_cast<int>(pending_.size() - 1));
}

void GpuTimeline::end() noexcept {
    if (open_.empty()) return;
    const int i = open_.back();
    open_.pop_back();
    // A failed record (a capture that went wrong, a device error) shows up when the span is read: it is dropped.
    if (capture_) {
#if defined(KILN_HIP)
        (void)cudaEventRecord(capture_->calls_[i].end, stream_);
#else
        (void)cudaEventRecordWithFlags(capture_->calls_[i].end, stream_, cudaEventRecordExternal);
#endif
    } else {
        (void)cudaEventRecord(pending_[i].end, stream_);
    }
}

void GpuTimeline::synchronized() {
    if (!anchored_ && pending_.empty()) return;  // never timed anything: the common case costs this branch
    // Inside an op (a host round trip) or a capture (no waits happen there), wait for the next sync point.
    if (capture_ || !open_.empty()) return;
    const bool read = !pending_.empty();
    resolve();
    if (!ops::device_spans_wanted()) {
        anchored_ = false;  // the profiler went: sync points cost nothing again
        return;
    }
    // The stream is idle: a fresh anchor keeps elapsed times short (float milliseconds) and follows any drift
    // between the GPU's clock and the host's. Not at every upload of a load, only after use or a second.
    if (read || steady_ns() - anchor_ns_ > 1000000000) set_anchor();
}

void GpuTimeline::wait_and_resolve() {
    KILN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    resolve();
    set_anchor();
}

void GpuTimeline::resolve() {
    // Precondition: no call is open, so every pending call has both events recorded.
    std::vector<ops::TimedCall> calls;
    calls.reserve(pending_.size());
    std::vector<int> index(pending_.size(), -1);  // pending_ -> calls
    const bool wanted = ops::device_spans_wanted();
    for (size_t i = 0; i < pending_.size() && wanted; ++i) {
        const Call& c = pending_[i];
        ops::TimedCall t;
        t.kind = c.kind;
        t.depth = c.depth;
        t.parent = c.parent >= 0 ? index[c.parent] : -1;  // parents come first; a dropped one leaves a top span
        t.flops = c.flops;
        if (!elapsed_ms(anchor_, c.start, &t.start_ms) || !elapsed_ms(anchor_, c.end, &t.end_ms)) continue;
        index[i] = static_cast<int>(calls.size());
        calls.push_back(t);
    }
    for (const Call& c : pending_)
        if (c.pooled) {
            free_.push_back(c.start);
            free_.push_back(c.end);
        }
    pending_.clear();
    for (const std::shared_ptr<GraphSpans>& g : queued_graphs_) g->queued_ = false;
    queued_graphs_.clear();
    if (!calls.empty())
        if (ops::OpObserver* o = ops::op_observer()) o->device_spans(device_, ops::resolve_device_spans(calls, anchor_ns_));
}

void GpuTimeline::ensure_anchor() {
    if (anchored_) return;
    // Once per profile: the anchor needs an idle stream, so that its event runs when it is recorded.
    KILN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    set_anchor();
}

void GpuTimeline::set_anchor() {
    if (!anchor_) KILN_CUDA_CHECK(cudaEventCreate(&anchor_));
    KILN_CUDA_CHECK(cudaEventRecord(anchor_, stream_));
    KILN_CUDA_CHECK(cudaEventSynchronize(anchor_));
    // Read after the event completed: the host time is at or just after the event's GPU time, so GPU spans are
    // placed late by the wake-up latency (microseconds), never before the host call that queued them.
    anchor_ns_ = steady_ns();
    anchored_ = true;
}

void GpuTimeline::begin_capture() {
    capture_ = std::make_shared<GraphSpans>();
    open_.clear();
}

std::shared_ptr<GpuTimeline::GraphSpans> GpuTimeline::end_capture() {
    std::shared_ptr<GraphSpans> g = std::move(capture_);
    capture_.reset();
    open_.clear();
    if (g && g->calls_.empty()) g.reset();
    return g;
}

void GpuTimeline::abort_capture() noexcept {
    capture_.reset();
    open_.clear();
}

void GpuTimeline::before_replay(const std::shared_ptr<GraphSpans>& spans) {
    if (!spans || !ops::device_spans_wanted() || !open_.empty()) return;
    if (spans->queued_) wait_and_resolve();  // the launch would record its events again before they were read
    ensure_anchor();
    const int base = static_cast<int>(pending_.size());
    for (Call c : spans->calls_) {
        c.parent = c.parent >= 0 ? base + c.parent : -1;
        c.pooled = false;
        pending_.push_back(c);
    }
    spans->queued_ = true;
    queued_graphs_.push_back(spans);
}

}  // namespace kiln::cuda
