// GPU time per op without a GPU: how event times become spans on the host's clock (ops/device_spans.h:
// anchoring, ordering, self time), how the profiler keeps the spans a GPU backend reports (totals per op
// kind, time axis, limits, observers in between), the report's GPU columns and the trace's GPU track.
#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ops/device_spans.h"
#include "ops/flop_tally.h"
#include "ops/op_observer.h"
#include "runtime/chrome_trace.h"
#include "runtime/flop_counter.h"
#include "runtime/profile_report.h"
#include "runtime/profiler.h"

using namespace kiln;
using ops::DeviceOpSpan;
using ops::OpKind;
using ops::TimedCall;

namespace {

TimedCall call(OpKind kind, double start_ms, double end_ms, int depth = 0, int parent = -1, double flops = 0) {
    TimedCall c;
    c.kind = kind;
    c.start_ms = start_ms;
    c.end_ms = end_ms;
    c.depth = depth;
    c.parent = parent;
    c.flops = flops;
    return c;
}

DeviceOpSpan span(OpKind kind, int64_t start_ns, int64_t duration_ns, int64_t self_ns = -1, double flops = 0,
                  int depth = 0) {
    return {kind, depth, start_ns, duration_ns, self_ns < 0 ? duration_ns : self_ns, flops};
}

}  // namespace

TEST(DeviceSpans, PlacesEventTimesAfterTheAnchorOnTheHostClock) {
    const int64_t anchor = 5'000'000'000;
    const auto spans = ops::resolve_device_spans({call(OpKind::Linear, 0.010, 0.250, 0, -1, 1e6)}, anchor);
    ASSERT_EQ(spans.size(), 1u);
    EXPECT_EQ(spans[0].kind, OpKind::Linear);
    EXPECT_EQ(spans[0].start_ns, anchor + 10'000);
    EXPECT_EQ(spans[0].duration_ns, 240'000);
    EXPECT_EQ(spans[0].self_ns, 240'000);
    EXPECT_DOUBLE_EQ(spans[0].flops, 1e6);
}

TEST(DeviceSpans, ConsecutiveCallsOnOneStreamDoNotOverlap) {
    // Each end read against the anchor, not start + duration: an end equal to the next start stays equal.
    std::vector<TimedCall> calls;
    double t = 0.0;
    for (int i = 0; i < 100; ++i) {
        const double d = 0.0013 * (i % 7 + 1);
        calls.push_back(call(OpKind::Add, t, t + d));
        t += d;
    }
    const auto spans = ops::resolve_device_spans(calls, 0);
    ASSERT_EQ(spans.size(), calls.size());
    for (size_t i = 1; i < spans.size(); ++i)
        EXPECT_GE(spans[i].start_ns, spans[i - 1].start_ns + spans[i - 1].duration_ns) << i;
}

TEST(DeviceSpans, NestedCallsGiveTheirParentItsSelfTime) {
    // group_norm (0.0-1.0 ms) holding a conv2d (0.2-0.9 ms), then a silu_: as conv2d_group_norm_silu nests them.
    const auto spans = ops::resolve_device_spans({call(OpKind::GroupNorm, 0.0, 1.0), call(OpKind::Conv2d, 0.2, 0.9, 1, 0),
                                                  call(OpKind::Silu, 1.0, 1.1)},
                                                 0);
    ASSERT_EQ(spans.size(), 3u);
    EXPECT_EQ(spans[0].kind, OpKind::GroupNorm);
    EXPECT_EQ(spans[0].duration_ns, 1'000'000);
    EXPECT_EQ(spans[0].self_ns, 300'000);
    EXPECT_EQ(spans[1].kind, OpKind::Conv2d);
    EXPECT_EQ(spans[1].depth, 1);
    EXPECT_EQ(spans[1].self_ns, 700'000);
    EXPECT_EQ(spans[2].self_ns, 100'000);
}

TEST(DeviceSpans, OrdersByStartWithTheEnclosingSpanFirst) {
    // A child listed before its parent, with the same start (an op whose first kernel is the inner op's).
    const auto spans = ops::resolve_device_spans({call(OpKind::Silu, 2.0, 3.0), call(OpKind::Conv2d, 0.0, 0.5, 1, 2),
                                                  call(OpKind::GroupNorm, 0.0, 1.0)},
                                                 0);
    ASSERT_EQ(spans.size(), 3u);
    EXPECT_EQ(spans[0].kind, OpKind::GroupNorm);
    EXPECT_EQ(spans[1].kind, OpKind::Conv2d);
    EXPECT_EQ(spans[2].kind, OpKind::Silu);
    EXPECT_EQ(spans[0].self_ns, 500'000);
}

TEST(DeviceSpans, NegativeTimesBecomeZeroNotNegativeSpans) {
    const auto spans = ops::resolve_device_spans({call(OpKind::Add, 1.0, 0.999), call(OpKind::Linear, 2.0, 2.0001),
                                                  call(OpKind::Add, 2.0, 2.0002, 1, 1)},
                                                 100);
    ASSERT_EQ(spans.size(), 3u);
    EXPECT_EQ(spans[0].duration_ns, 0);
    EXPECT_EQ(spans[0].start_ns, 100 + 1'000'000);
    EXPECT_EQ(spans[1].kind, OpKind::Linear);
    EXPECT_EQ(spans[1].self_ns, 0);  // its child reads longer than it through rounding
}

TEST(ProfilerGpu, WantsSpansOnlyWhileRunning) {
    Profiler p;
    EXPECT_FALSE(p.wants_device_spans());
    EXPECT_FALSE(ops::device_spans_wanted());
    p.start();
    EXPECT_TRUE(p.wants_device_spans());
    EXPECT_TRUE(ops::device_spans_wanted());
    {
        FlopCounter counter;  // observers in between pass the wish and the spans on
        ops::FlopTally tally;
        EXPECT_TRUE(ops::device_spans_wanted());
        ops::op_observer()->device_spans("cuda:0", {span(OpKind::Linear, p.steady_origin_ns() + 1000, 2000)});
    }
    p.stop();
    EXPECT_FALSE(ops::device_spans_wanted());
    p.device_spans("cuda:0", {span(OpKind::Linear, p.steady_origin_ns() + 5000, 2000)});  // after stop: ignored
    const ProfileSummary s = p.summary();
    ASSERT_EQ(s.gpu_spans.size(), 1u);
    ASSERT_EQ(s.ops.size(), 1u);
    EXPECT_EQ(s.ops[0].gpu_calls, 1);
    EXPECT_EQ(s.ops[0].calls, 0);  // no host op ran
}

TEST(ProfilerGpu, TotalsPerKindUseSelfTimeAndSpansSitOnTheProfilersAxis) {
    Profiler p;
    p.start();
    const int64_t t0 = p.steady_origin_ns();
    ops::OpScope host(OpKind::Conv2d, 10.0);  // one host op of the same kind: its calls stay the host's
    p.device_spans("cuda:0", {span(OpKind::GroupNorm, t0 + 100'000, 50'000, 20'000, 0.0),
                              span(OpKind::Conv2d, t0 + 110'000, 30'000, 30'000, 4e9, 1),
                              span(OpKind::Conv2d, t0 + 200'000, 10'000, 10'000, 1e9)});
    p.device_spans("cuda:0", {span(OpKind::Add, t0 + 300'000, 1'000)});
    p.stop();
    const ProfileSummary s = p.summary();
    EXPECT_TRUE(s.has_gpu_time());
    ASSERT_EQ(s.gpu_devices, std::vector<std::string>{"cuda:0"});
    std::map<OpKind, OpKindStats> by_kind;
    for (const OpKindStats& k : s.ops) by_kind[k.kind] = k;
    EXPECT_EQ(by_kind[OpKind::Conv2d].calls, 1);
    EXPECT_EQ(by_kind[OpKind::Conv2d].gpu_calls, 2);
    EXPECT_DOUBLE_EQ(by_kind[OpKind::Conv2d].gpu_us, 40.0);
    EXPECT_DOUBLE_EQ(by_kind[OpKind::Conv2d].gpu_flops, 5e9);
    EXPECT_DOUBLE_EQ(by_kind[OpKind::GroupNorm].gpu_us, 20.0);
    EXPECT_DOUBLE_EQ(by_kind[OpKind::Add].gpu_us, 1.0);
    EXPECT_DOUBLE_EQ(s.gpu_op_us, 61.0);
    EXPECT_EQ(s.ops[0].kind, OpKind::Conv2d);  // ranked by GPU time
    ASSERT_EQ(s.gpu_spans.size(), 4u);
    EXPECT_EQ(s.gpu_spans[0].kind, ProfileSpan::Kind::GpuOp);
    EXPECT_STREQ(s.gpu_spans[0].name(), "group_norm");
    EXPECT_DOUBLE_EQ(s.gpu_spans[0].start_us, 100.0);
    EXPECT_DOUBLE_EQ(s.gpu_spans[0].duration_us, 50.0);
    EXPECT_EQ(s.gpu_spans[1].depth, 1);
    EXPECT_DOUBLE_EQ(s.gpu_spans[3].start_us, 300.0);
    EXPECT_TRUE(p.summary(/*with_spans=*/false).gpu_spans.empty());
}

TEST(ProfilerGpu, EachDeviceIsATrackAndSpansBeyondTheLimitStayInTheTotals) {
    Profiler p;
    p.start(/*max_spans=*/3);
    const int64_t t0 = p.steady_origin_ns();
    p.device_spans("cuda:1", {span(OpKind::Add, t0 + 2000, 100), span(OpKind::Add, t0 + 3000, 100)});
    p.device_spans("cuda:0", {span(OpKind::Add, t0 + 1000, 100), span(OpKind::Add, t0 + 4000, 100)});
    p.stop();
    const ProfileSummary s = p.summary();
    EXPECT_EQ(s.gpu_devices, (std::vector<std::string>{"cuda:1", "cuda:0"}));
    ASSERT_EQ(s.gpu_spans.size(), 3u);
    EXPECT_EQ(s.dropped_gpu_spans, 1);
    EXPECT_EQ(s.gpu_spans[0].track, 1);  // cuda:0's first span is the earliest
    EXPECT_EQ(s.gpu_spans[1].track, 0);
    ASSERT_EQ(s.ops.size(), 1u);
    EXPECT_EQ(s.ops[0].gpu_calls, 4);
    EXPECT_DOUBLE_EQ(s.ops[0].gpu_us, 0.4);
}

TEST(ProfileReportGpu, ShowsHostAndGpuTimePerKindOnlyWhenThereIsGpuTime) {
    Profiler p;
    p.start();
    const int64_t t0 = p.steady_origin_ns();
    p.device_spans("cuda:0", {span(OpKind::Linear, t0 + 1000, 2'000'000, -1, 4e9)});
    p.stop();
    const std::string report = format_profile_report(p.summary(), memory_stats());
    for (const char* word : {"GPU ms", "host ms", "GPU calls", "GPU share", "linear", "2.0", "2000.0", "cuda:0"})
        EXPECT_NE(report.find(word), std::string::npos) << word << "\n" << report;

    Profiler cpu;
    cpu.start();
    cpu.stop();
    EXPECT_EQ(format_profile_report(cpu.summary(), memory_stats()).find("GPU"), std::string::npos);
}

TEST(ChromeTraceGpu, GpuSpansAreOnTheirOwnNamedTrackOnTheSameAxis) {
    Profiler p;
    p.start();
    const int64_t t0 = p.steady_origin_ns();
    {
        StageScope zone(Stage::DenoiseStep);
        ops::OpScope host(OpKind::Conv2d, 1.0);
    }
    p.device_spans("cuda:0", {span(OpKind::Conv2d, t0 + 40'000, 30'000, 30'000, 8.0)});
    p.stop();
    std::ostringstream out;
    write_chrome_trace(p.summary(), out);
    const nlohmann::json trace = nlohmann::json::parse(out.str());
    int gpu_tid = -1;
    for (const auto& e : trace["traceEvents"])
        if (e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["name"] == "GPU cuda:0") gpu_tid = e["tid"];
    ASSERT_GE(gpu_tid, 0) << out.str();
    std::vector<nlohmann::json> gpu, host;
    for (const auto& e : trace["traceEvents"]) {
        if (e["ph"] != "X") continue;
        (e["cat"] == "gpu_op" ? gpu : host).push_back(e);
    }
    ASSERT_EQ(gpu.size(), 1u);
    EXPECT_EQ(gpu[0]["tid"], gpu_tid);
    EXPECT_EQ(gpu[0]["name"], "conv2d");
    EXPECT_DOUBLE_EQ(gpu[0]["ts"].get<double>(), 40.0);
    EXPECT_DOUBLE_EQ(gpu[0]["dur"].get<double>(), 30.0);
    EXPECT_DOUBLE_EQ(gpu[0]["args"]["flops"].get<double>(), 8.0);
    ASSERT_EQ(host.size(), 2u);  // the zone and its op
    for (const auto& e : host) EXPECT_NE(e["tid"], gpu_tid);
    EXPECT_EQ(trace["otherData"]["dropped_gpu_spans"], 0);
}
