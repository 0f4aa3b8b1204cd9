// A hook for the profiler: every op reports when it starts and ends. With no observer set the cost is
// one load and a not-taken branch per op call.
#pragma once
#include <atomic>
#include <string>
#include <vector>

#include "ops/device_spans.h"
#include "ops/op_list.h"

namespace kiln::ops {

struct OpObserver {
    virtual ~OpObserver() = default;
    // flops: floating-point operations of the call, counting a multiply-add as 2 (2*M*N*K for a GEMM);
    // 0 for ops whose cost is memory traffic rather than arithmetic.
    virtual void begin(OpKind kind, double flops) = 0;
    virtual void end(OpKind kind) = 0;

    // GPU time (ops/device_spans.h). A GPU backend records events around its ops only while the observer
    // wants them (a profiler does; counting FLOPs does not), and reports the spans in batches, at points where
    // the host waits for the device anyway. device: the memory-accounting name ("cuda:0").
    virtual bool wants_device_spans() const { return false; }
    virtual void device_spans(const std::string& device, const std::vector<DeviceOpSpan>& spans) {
        (void)device;
        (void)spans;
    }
};

namespace detail {
// Atomic so that a profiler may attach while another thread runs ops; release/acquire makes the
// observer's construction visible to the thread that calls it. Inline so that the check is one load.
inline std::atomic<OpObserver*> g_op_observer{nullptr};
}  // namespace detail

// Process-wide; nullptr turns observation off. The observer must outlive the ops that report to it.
// Ops run their own threads internally but report only from the calling thread.
inline void set_op_observer(OpObserver* observer) { detail::g_op_observer.store(observer, std::memory_order_release); }
inline OpObserver* op_observer() { return detail::g_op_observer.load(std::memory_order_acquire); }
inline bool device_spans_wanted() {
    OpObserver* o = op_observer();
    return o && o->wants_device_spans();
}

// Brackets one op call; end() runs on every exit, exceptions included.
class OpScope {
public:
    explicit OpScope(OpKind kind, double flops = 0.0) : observer_(op_observer()), kind_(kind) {
        if (observer_) observer_->begin(kind, flops);
    }
    ~OpScope() {
        if (observer_) observer_->end(kind_);
    }
    OpScope(const OpScope&) = delete;
    OpScope& operator=(const OpScope&) = delete;

private:
    OpObserver* observer_;
    OpKind kind_;
};

}  // namespace kiln::ops
