// GPU time of op calls, as a GPU backend measures it with events queued on its stream around each op's
// kernels, and how those event times become spans on the host's clock. Header-only: the GPU backends link
// only kiln_core, and the CPU tests check the arithmetic without a GPU.
//
// The backend keeps one anchor: an event recorded on an idle stream right after the host waited for it,
// with the host's steady_clock time read once the event has completed. Every other event is read back as
// milliseconds after that anchor (cudaEventElapsedTime), so a span's host time is anchor + elapsed. Reading
// both ends of a span against the same anchor (not start + duration) keeps consecutive spans on one stream
// from overlapping through rounding: the conversion is monotonic in the event's true time.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "ops/op_list.h"

namespace kiln::ops {

// One op call's GPU time, on the host's clock.
struct DeviceOpSpan {
    OpKind kind = OpKind::Linear;
    int depth = 0;            // 0 for an op called by model code, 1 for one inside another op's span, ...
    int64_t start_ns = 0;     // std::chrono::steady_clock nanoseconds (since its epoch)
    int64_t duration_ns = 0;  // end - start, >= 0
    int64_t self_ns = 0;      // duration less that of the spans directly inside it
    double flops = 0;         // as the op reported them
};

// One op call as the backend recorded it: its place in the nesting and its events' times, in milliseconds
// after the anchor event.
struct TimedCall {
    OpKind kind = OpKind::Linear;
    int depth = 0;
    int parent = -1;  // index of the enclosing call in the same list, -1 at the top
    double flops = 0;
    double start_ms = 0, end_ms = 0;
};

// The calls as spans on the host's clock, ordered by start (an enclosing span before those inside it).
// anchor_ns: the host time of the anchor event. A negative duration (an event read back before its start,
// which one stream does not do) becomes 0, as does a self time that rounding would make negative.
inline std::vector<DeviceOpSpan> resolve_device_spans(const std::vector<TimedCall>& calls, int64_t anchor_ns) {
    const size_t n = calls.size();
    std::vector<DeviceOpSpan> spans(n);
    for (size_t i = 0; i < n; ++i) {
        const TimedCall& c = calls[i];
        const int64_t start = anchor_ns + std::llround(c.start_ms * 1e6);
        const int64_t end = anchor_ns + std::llround(c.end_ms * 1e6);
        spans[i] = {c.kind, c.depth, start, std::max<int64_t>(0, end - start), 0, c.flops};
        spans[i].self_ns = spans[i].duration_ns;
    }
    for (size_t i = 0; i < n; ++i)
        if (calls[i].parent >= 0 && size_t(calls[i].parent) < n) spans[calls[i].parent].self_ns -= spans[i].duration_ns;
    for (DeviceOpSpan& s : spans) s.self_ns = std::max<int64_t>(0, s.self_ns);
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return spans[a].start_ns != spans[b].start_ns ? spans[a].start_ns < spans[b].start_ns
                                                      : spans[a].depth < spans[b].depth;
    });
    std::vector<DeviceOpSpan> out;
    out.reserve(n);
    for (size_t i : order) out.push_back(spans[i]);
    return out;
}

}  // namespace kiln::ops
