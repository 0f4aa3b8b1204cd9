// The profiler: stage zones and op spans, per-kind aggregates with the FLOPs the ops report, per-stage
// memory peaks, the Chrome trace's structure, and that it is off (and free) unless started.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kiln/error.h"
#include "ops/ops.h"
#include "runtime/chrome_trace.h"
#include "runtime/flop_counter.h"
#include "runtime/profile_report.h"
#include "runtime/profiler.h"

using namespace kiln;

namespace {

Tensor ones(const Shape& s) { return Tensor::filled(s, 0.5f); }

// A small workload in three stages with known op counts.
void workload() {
    {
        StageScope zone(Stage::TextEncode);
        Tensor x = ones({1, 7, 16});
        Tensor w = ones({32, 16}), b = ones({32});
        for (int i = 0; i < 3; ++i) ops::linear(x, w, &b);  // 3 linear, 2*7*32*16 FLOPs each
    }
    for (int step = 0; step < 2; ++step) {
        StageScope zone(Stage::DenoiseStep);
        Tensor x = ones({1, 4, 8, 8}), w = ones({8, 4, 3, 3});
        Tensor y = ops::conv2d(x, w, nullptr, 1, 1);  // 2 * 8 * 64 * (4*9) FLOPs
        ops::silu_(y);
    }
    {
        StageScope zone(Stage::VaeDecode);
        Tensor big({1 << 18});  // 1 MiB held inside the zone
        Tensor q = ones({1, 10, 8});
        ops::attention(q, q, q, 2);  // 4 * 1 * 2 * 10 * 10 * 4 FLOPs
    }
}

const ProfileSpan* enclosing_stage(const std::vector<ProfileSpan>& spans, const ProfileSpan& op) {
    for (const ProfileSpan& s : spans)
        if (s.kind == ProfileSpan::Kind::Stage && s.start_us <= op.start_us &&
            op.start_us + op.duration_us <= s.start_us + s.duration_us)
            return &s;
    return nullptr;
}

}  // namespace

TEST(Profiler, OffUnlessStarted) {
    EXPECT_EQ(ops::op_observer(), nullptr);
    EXPECT_EQ(detail::active_profiler(), nullptr);
    StageScope zone(Stage::Load);  // no profiler: does nothing
    Profiler p;
    EXPECT_FALSE(p.running());
    Tensor t = ones({4});
    ops::silu_(t);
    EXPECT_TRUE(p.summary().spans.empty());
}

TEST(Profiler, CountsOpsAndFlopsPerKindAndStage) {
    Profiler p;
    p.start();
    EXPECT_EQ(ops::op_observer(), &p);
    workload();
    p.stop();
    EXPECT_EQ(ops::op_observer(), nullptr);
    const ProfileSummary s = p.summary();

    std::map<ops::OpKind, OpKindStats> by_kind;
    for (const OpKindStats& k : s.ops) by_kind[k.kind] = k;
    ASSERT_EQ(by_kind.size(), 4u);
    EXPECT_EQ(by_kind[ops::OpKind::Linear].calls, 3);
    EXPECT_EQ(by_kind[ops::OpKind::Conv2d].calls, 2);
    EXPECT_EQ(by_kind[ops::OpKind::Silu].calls, 2);
    EXPECT_EQ(by_kind[ops::OpKind::Attention].calls, 1);
    // FLOPs: a GEMM of M x N x K is 2*M*N*K (op_observer.h); a conv is the GEMM of its im2col;
    // attention is two GEMMs per head, 4 * B * H * Lq * Lk * D.
    EXPECT_DOUBLE_EQ(by_kind[ops::OpKind::Linear].flops, 3.0 * 2 * 7 * 32 * 16);
    EXPECT_DOUBLE_EQ(by_kind[ops::OpKind::Conv2d].flops, 2.0 * 2 * 8 * 64 * (4 * 9));
    EXPECT_DOUBLE_EQ(by_kind[ops::OpKind::Attention].flops, 4.0 * 1 * 2 * 10 * 10 * 4);
    EXPECT_EQ(by_kind[ops::OpKind::Silu].flops, 0.0);

    std::map<Stage, StageStats> by_stage;
    for (const StageStats& st : s.stages) by_stage[st.stage] = st;
    EXPECT_EQ(by_stage[Stage::TextEncode].calls, 1);
    EXPECT_EQ(by_stage[Stage::DenoiseStep].calls, 2);
    EXPECT_EQ(by_stage[Stage::VaeDecode].calls, 1);
    EXPECT_EQ(by_stage.count(Stage::Load), 0u);
    double op_total = 0;
    for (const auto& [stage, st] : by_stage) {
        EXPECT_LE(st.op_us, st.total_us + 1e-3) << stage_name(stage);
        op_total += st.op_us;
    }
    EXPECT_NEAR(op_total, s.op_us, 1e-6 * std::max(1.0, s.op_us));
    EXPECT_LE(s.op_us, s.wall_us);
    // The zone that held a 1 MiB tensor peaked about 1 MiB above the text zone, whose own tensors are
    // a few KiB (64 KiB is a generous bound for them).
    EXPECT_GE(by_stage[Stage::VaeDecode].peak_bytes - by_stage[Stage::TextEncode].peak_bytes, (1 << 20) - (64 << 10));
}

TEST(Profiler, PausedRunsAreLeftOutOfCountsAndWallTime) {
    Profiler p;
    p.start();
    workload();
    p.pause(true);
    const auto t0 = std::chrono::steady_clock::now();
    workload();  // as a bench's warm-up: not counted
    while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(200)) {
    }
    p.pause(false);
    workload();
    p.stop();
    const ProfileSummary s = p.summary();
    std::map<ops::OpKind, OpKindStats> by_kind;
    for (const OpKindStats& k : s.ops) by_kind[k.kind] = k;
    EXPECT_EQ(by_kind[ops::OpKind::Linear].calls, 6);  // two unpaused workloads of 3
    EXPECT_EQ(by_kind[ops::OpKind::Conv2d].calls, 4);
    int decode_zones = 0;
    for (const StageStats& st : s.stages)
        if (st.stage == Stage::VaeDecode) decode_zones = st.calls;
    EXPECT_EQ(decode_zones, 2);
    // The 200 ms spent paused is not wall time: the two workloads alone take far less on any machine that runs
    // this suite; what is left must stay below the paused time.
    const double worked_us = s.op_us;
    EXPECT_LT(s.wall_us, worked_us + 200000.0) << "wall " << s.wall_us << " us, ops " << worked_us << " us";
}

TEST(Profiler, SpansNestOpsInsideTheirStages) {
    Profiler p;
    p.start();
    workload();
    p.stop();
    const ProfileSummary s = p.summary();
    int stages = 0, ops_seen = 0;
    std::map<const ProfileSpan*, double> op_time_in;
    for (const ProfileSpan& span : s.spans) {
        if (span.kind == ProfileSpan::Kind::Stage) {
            ++stages;
            EXPECT_EQ(span.depth, 0);
            continue;
        }
        ++ops_seen;
        EXPECT_EQ(span.depth, 1);
        const ProfileSpan* stage = enclosing_stage(s.spans, span);
        ASSERT_NE(stage, nullptr) << span.name() << " outside every stage";
        op_time_in[stage] += span.duration_us;
    }
    EXPECT_EQ(stages, 4);
    EXPECT_EQ(ops_seen, 8);
    for (const auto& [stage, t] : op_time_in) EXPECT_LE(t, stage->duration_us) << stage->name();
    // The denoise zones are numbered in order.
    std::vector<int> steps;
    for (const ProfileSpan& span : s.spans)
        if (span.kind == ProfileSpan::Kind::Stage && span.code == static_cast<int>(Stage::DenoiseStep))
            steps.push_back(span.index);
    EXPECT_EQ(steps, (std::vector<int>{0, 1}));
}

TEST(Profiler, NestedStagesCarryTheInnerPeakOutward) {
    Profiler p;
    p.start();
    {
        StageScope outer(Stage::Other);
        {
            StageScope inner(Stage::Load);
            Tensor big({1 << 19});  // 2 MiB, freed before the outer zone ends
        }
        Tensor small({16});
    }
    p.stop();
    const ProfileSummary s = p.summary();
    ASSERT_EQ(s.spans.size(), 2u);
    const ProfileSpan& outer = s.spans[0];
    const ProfileSpan& inner = s.spans[1];
    EXPECT_EQ(inner.depth, 1);
    EXPECT_GE(inner.start_us, outer.start_us);
    EXPECT_LE(inner.start_us + inner.duration_us, outer.start_us + outer.duration_us);
    EXPECT_GE(outer.peak_bytes, inner.peak_bytes);
    EXPECT_GE(inner.peak_bytes, memory_stats().device("cpu").total.current + (int64_t(1) << 21));
}

TEST(Profiler, OneAtATimeAndStopClosesOpenZones) {
    Profiler a, b;
    a.start();
    EXPECT_THROW(b.start(), Error);
    EXPECT_THROW(a.start(), Error);
    a.begin_stage(Stage::Load);  // left open
    a.stop();
    const ProfileSummary s = a.summary();
    ASSERT_EQ(s.spans.size(), 1u);
    EXPECT_LE(s.spans[0].start_us + s.spans[0].duration_us, s.wall_us + 1e-3);
    b.start();  // now free
    b.stop();
}

TEST(Profiler, SpansBeyondTheLimitStayInTheTotals) {
    Profiler p;
    p.start(/*max_spans=*/3);
    Tensor x = ones({64});
    for (int i = 0; i < 10; ++i) ops::scale_(x, 1.0f);
    p.stop();
    const ProfileSummary s = p.summary();
    EXPECT_EQ(s.spans.size(), 3u);
    EXPECT_EQ(s.dropped_spans, 7);
    ASSERT_EQ(s.ops.size(), 1u);
    EXPECT_EQ(s.ops[0].calls, 10);
}

TEST(Profiler, FlopCounterCountsAlongsideTheProfiler) {
    Profiler p;
    p.start();
    {
        FlopCounter counter;
        ops::linear(ones({2, 8}), ones({4, 8}), nullptr);
        EXPECT_DOUBLE_EQ(counter.flops(), 2.0 * 2 * 4 * 8);
        EXPECT_EQ(counter.calls(), 1);
    }
    EXPECT_EQ(ops::op_observer(), &p);
    p.stop();
    ASSERT_EQ(p.summary().ops.size(), 1u);
    EXPECT_EQ(p.summary().ops[0].calls, 1);
}

TEST(ChromeTrace, IsTraceEventJsonWithOneSpanPerZoneAndNestedOps) {
    Profiler p;
    p.start();
    workload();
    p.stop();
    std::ostringstream out;
    write_chrome_trace(p.summary(), out);
    const nlohmann::json trace = nlohmann::json::parse(out.str());  // throws if not JSON
    ASSERT_TRUE(trace.contains("traceEvents") && trace["traceEvents"].is_array());
    std::vector<nlohmann::json> stages, op_events;
    for (const auto& e : trace["traceEvents"]) {
        ASSERT_TRUE(e.contains("ph") && e.contains("name") && e.contains("pid") && e.contains("tid"));
        if (e["ph"] == "M") continue;
        ASSERT_EQ(e["ph"], "X");
        ASSERT_TRUE(e["ts"].is_number() && e["dur"].is_number());
        EXPECT_GE(e["dur"].get<double>(), 0.0);
        (e["cat"] == "stage" ? stages : op_events).push_back(e);
    }
    std::map<std::string, int> zones;
    for (const auto& st : stages) ++zones[st["name"]];
    EXPECT_EQ(zones, (std::map<std::string, int>{{"text_encode", 1}, {"denoise_step", 2}, {"vae_decode", 1}}));
    EXPECT_EQ(op_events.size(), 8u);
    std::vector<double> op_sum(stages.size(), 0.0);
    for (const auto& op : op_events) {
        int found = -1;
        const double ts = op["ts"], end = ts + op["dur"].get<double>();
        for (size_t i = 0; i < stages.size(); ++i)
            if (stages[i]["tid"] == op["tid"] && stages[i]["ts"].get<double>() <= ts &&
                end <= stages[i]["ts"].get<double>() + stages[i]["dur"].get<double>())
                found = static_cast<int>(i);
        ASSERT_GE(found, 0) << op.dump();
        op_sum[found] += op["dur"].get<double>();
    }
    for (size_t i = 0; i < stages.size(); ++i) EXPECT_LE(op_sum[i], stages[i]["dur"].get<double>()) << stages[i].dump();
}

TEST(ChromeTrace, UnwritableFileIsAnIOError) {
    Profiler p;
    try {
        write_chrome_trace_file(p.summary(), "/nonexistent-dir/trace.json");
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::IO);
        EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/trace.json"), std::string::npos);
    }
}

TEST(ProfileReport, NamesStagesOpKindsAndMemoryCategories) {
    Profiler p;
    p.start();
    workload();
    p.stop();
    const std::string report = format_profile_report(p.summary(), memory_stats());
    for (const char* word : {"text_encode", "denoise_step", "vae_decode", "linear", "conv2d", "attention", "silu_",
                             "weights", "activations", "workspace", "mapped_file", "GFLOP/s", "peak MiB"})
        EXPECT_NE(report.find(word), std::string::npos) << word << "\n" << report;
    const std::string top = format_profile_report(p.summary(), memory_stats(), 2);
    EXPECT_NE(top.find("(2 more)"), std::string::npos) << top;
}

// The allocator's line: nothing when it asked the driver for nothing; the counts of a run since its start
// (AllocatorCounts::since), give-backs only where there were some.
TEST(ProfileReport, AllocatorCountsOfTheRun) {
    EXPECT_EQ(format_allocator_counts("cuda:0", {}), "");
    const AllocatorCounts start{10, 5.0, 1, 2, 0.5};
    const AllocatorCounts end{13, 5.81, 1, 2, 0.5};
    EXPECT_EQ(format_allocator_counts("cuda:0", end.since(start)),
              "allocator (cuda:0): 3 allocations from the driver (0.8 ms)\n");
    const AllocatorCounts churn{12, 70.23, 7, 9, 242.47};
    EXPECT_EQ(format_allocator_counts("vulkan:1", churn),
              "allocator (vulkan:1): 12 allocations from the driver (70.2 ms); 7 give-backs of 9 cached blocks, "
              "each after a wait for the device (242.5 ms)\n");
}
