// GPU time per op on the CUDA backend (gpu_timeline.h): with an observer that wants device spans, every op
// gets one span measured with events on the stream, reported at the next wait; eager ops and the ops of a
// replayed CUDA graph alike. Checks: one span per op call of each kind, positive durations, no two top-level
// spans overlapping on the stream, nested spans inside their parent, and every span inside the host's wall
// time of the region (so their sum is too). Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "core/tensor.h"
#include "kernel_test_support.h"
#include "ops/device_ops.h"
#include "ops/flop_tally.h"
#include "ops/op_observer.h"

namespace kiln::cuda {
namespace {

using ops::DeviceOpSpan;
using ops::OpKind;

// The op names without linking the ops library (the standalone build has only the reference ops).
const char* kind_name(OpKind kind) {
    switch (kind) {
#define KILN_KIND_NAME(kind, fn) \
    case OpKind::kind: return #fn;
        KILN_OP_LIST(KILN_KIND_NAME)
#undef KILN_KIND_NAME
    }
    return "?";
}

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// Collects what a profiler would get: host op calls per kind and the GPU spans.
struct Recorder : ops::OpObserver {
    bool want = true;
    std::map<OpKind, int> host_calls;
    std::vector<DeviceOpSpan> spans;
    std::string device;
    int batches = 0;
    void begin(OpKind kind, double) override { ++host_calls[kind]; }
    void end(OpKind) override {}
    bool wants_device_spans() const override { return want; }
    void device_spans(const std::string& d, const std::vector<DeviceOpSpan>& s) override {
        device = d;
        ++batches;
        spans.insert(spans.end(), s.begin(), s.end());
    }
    std::map<OpKind, int> gpu_calls() const {
        std::map<OpKind, int> n;
        for (const DeviceOpSpan& s : spans) ++n[s.kind];
        return n;
    }
};

class Attach {
public:
    explicit Attach(ops::OpObserver* o) { ops::set_op_observer(o); }
    ~Attach() { ops::set_op_observer(nullptr); }
};

Tensor ramp(const Shape& shape, Backend& gpu, float scale = 1e-3f) {
    std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
    for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(int(i % 97) - 48);
    return Tensor(shape, std::move(v)).to_device(gpu, DType::F16);
}

// Spans on one stream: top-level ones one after another, nested ones inside the one before them at a lower
// depth; all inside [t0, t1] (the anchor's host time is read after its event ran: spans are late by
// microseconds at most, never early), durations positive.
void expect_well_formed(const std::vector<DeviceOpSpan>& spans, int64_t t0, int64_t t1) {
    ASSERT_FALSE(spans.empty());
    const int64_t slack = 200'000;  // 0.2 ms for the anchor's wake-up latency
    int64_t top_end = t0, top_sum = 0;
    std::vector<const DeviceOpSpan*> open;
    for (const DeviceOpSpan& s : spans) {
        EXPECT_GT(s.duration_ns, 0) << kind_name(s.kind);
        EXPECT_GE(s.start_ns, t0) << kind_name(s.kind);
        EXPECT_LE(s.start_ns + s.duration_ns, t1 + slack) << kind_name(s.kind);
        EXPECT_LE(s.self_ns, s.duration_ns);
        while (!open.empty() && open.back()->depth >= s.depth) open.pop_back();
        if (s.depth == 0) {
            EXPECT_GE(s.start_ns, top_end) << kind_name(s.kind) << " overlaps the span before it";
            top_end = s.start_ns + s.duration_ns;
            top_sum += s.duration_ns;
        } else {
            ASSERT_FALSE(open.empty()) << kind_name(s.kind) << " at depth " << s.depth << " has no parent";
            const DeviceOpSpan& p = *open.back();
            EXPECT_GE(s.start_ns, p.start_ns) << kind_name(s.kind) << " in " << kind_name(p.kind);
            EXPECT_LE(s.start_ns + s.duration_ns, p.start_ns + p.duration_ns) << kind_name(s.kind) << " in "
                                                                             << kind_name(p.kind);
        }
        open.push_back(&s);
    }
    EXPECT_LE(top_sum, t1 - t0 + slack);
    std::printf("[ timeline ] %zu spans, GPU busy %.3f ms of %.3f ms wall\n", spans.size(), top_sum / 1e6,
                (t1 - t0) / 1e6);
}

// A few ops of a UNet block, the fused GroupNorm+SiLU convolution nesting a conv2d span in a group_norm one.
Tensor block(const ops::DeviceOps& o, const Tensor& x, const Tensor& w, const Tensor& gamma, const Tensor& beta,
             const Tensor& lin_w, const Tensor& lin_b) {
    Tensor h = o.conv2d_group_norm_silu(x, 32, gamma, beta, 1e-5f, w, nullptr, 1, 1);
    o.add_(h, x);
    Tensor seq = o.nchw_to_nlc(h);  // [1, 256, 320]
    Tensor y = o.linear(seq, lin_w, &lin_b);  // [1, 256, 640]
    Tensor g = o.geglu(y);  // [1, 256, 320]
    Tensor a = o.attention(g, g, g, 8, false);
    o.activation_(a, ops::DeviceActivation::Silu);
    return o.layer_norm(a, gamma, beta, 1e-5f);
}

struct Weights {
    Tensor x, w, gamma, beta, lin_w, lin_b;
    explicit Weights(Backend& gpu)
        : x(ramp({1, 320, 16, 16}, gpu)),
          w(ramp({320, 320, 3, 3}, gpu)),
          gamma(ramp({320}, gpu, 1e-2f)),
          beta(ramp({320}, gpu, 1e-2f)),
          lin_w(ramp({640, 320}, gpu)),
          lin_b(ramp({640}, gpu)) {}
};

TEST(GpuTimeline, EachEagerOpGetsAGpuSpanReadAtTheNextWait) {
    KILN_SKIP_WITHOUT_GPU();
    CudaBackend gpu(0);
    Weights p(gpu);
    Recorder rec;
    Attach attach(&rec);
    gpu.synchronize();
    const int64_t t0 = now_ns();
    block(gpu.ops(), p.x, p.w, p.gamma, p.beta, p.lin_w, p.lin_b);
    EXPECT_TRUE(rec.spans.empty()) << "spans are read at a wait, not as ops are queued";
    gpu.synchronize();
    const int64_t t1 = now_ns();
    EXPECT_EQ(rec.device, "cuda:0");
    EXPECT_EQ(rec.gpu_calls(), rec.host_calls) << "one GPU span per op call of each kind";
    for (OpKind k : {OpKind::Conv2d, OpKind::GroupNorm, OpKind::Add, OpKind::NchwToNlc, OpKind::Linear, OpKind::Geglu,
                     OpKind::Attention, OpKind::Silu, OpKind::LayerNorm})
        EXPECT_EQ(rec.gpu_calls()[k], 1) << kind_name(k);
    expect_well_formed(rec.spans, t0, t1);
    for (const DeviceOpSpan& s : rec.spans) {
        if (s.kind == OpKind::Conv2d) {
            EXPECT_EQ(s.depth, 1) << "the fused convolution's conv2d is inside group_norm";
        }
    }
    for (const DeviceOpSpan& s : rec.spans)
        std::printf("[ timeline ] %-20s depth %d  %8.3f us (self %8.3f us)\n", kind_name(s.kind), s.depth,
                    s.duration_ns / 1e3, s.self_ns / 1e3);
}

TEST(GpuTimeline, ReplayedGraphsTimeEachOpThroughEventRecordNodes) {
    KILN_SKIP_WITHOUT_GPU();
    CudaBackend gpu(0);
    if (!gpu.graphs_enabled()) GTEST_SKIP() << "KILN_CUDA_GRAPHS=0 or KILN_CUDA_SYNC_OPS=1: no graphs";
    Weights p(gpu);
    Recorder rec;
    Attach attach(&rec);
    auto fn = [&](const std::vector<const Tensor*>& in) {
        return block(gpu.ops(), *in[0], p.w, p.gamma, p.beta, p.lin_w, p.lin_b);
    };
    // Call 1 eager, call 2 captured and launched, calls 3-4 replays; a wait after each.
    std::vector<std::map<OpKind, int>> per_call;
    for (int call = 0; call < 4; ++call) {
        rec.spans.clear();
        gpu.synchronize();
        const int64_t t0 = now_ns();
        gpu.run_recorded("timeline-test", {&p.x}, fn);
        gpu.synchronize();
        const int64_t t1 = now_ns();
        SCOPED_TRACE("call " + std::to_string(call + 1));
        expect_well_formed(rec.spans, t0, t1);
        per_call.push_back(rec.gpu_calls());
    }
    for (size_t i = 1; i < per_call.size(); ++i) EXPECT_EQ(per_call[i], per_call[0]) << "call " << i + 1;

    // Two replays with no wait between them: the second waits for the first's events to be read first.
    rec.spans.clear();
    gpu.synchronize();
    const int64_t t0 = now_ns();
    gpu.run_recorded("timeline-test", {&p.x}, fn);
    gpu.run_recorded("timeline-test", {&p.x}, fn);
    gpu.synchronize();
    const int64_t t1 = now_ns();
    expect_well_formed(rec.spans, t0, t1);
    for (auto [kind, n] : per_call[0]) EXPECT_EQ(rec.gpu_calls()[kind], 2 * n) << kind_name(kind);
}

TEST(GpuTimeline, NothingIsTimedUnlessTheObserverWantsIt) {
    KILN_SKIP_WITHOUT_GPU();
    CudaBackend gpu(0);
    Weights p(gpu);
    Recorder rec;
    rec.want = false;  // as an observer that only counts FLOPs
    {
        Attach attach(&rec);
        block(gpu.ops(), p.x, p.w, p.gamma, p.beta, p.lin_w, p.lin_b);
        gpu.synchronize();
    }
    EXPECT_FALSE(rec.host_calls.empty());
    EXPECT_EQ(rec.batches, 0);
    {
        ops::FlopTally tally;  // the capture's tally alone wants no spans either
        EXPECT_FALSE(ops::device_spans_wanted());
    }
}

TEST(GpuTimeline, AFullPoolIsReadBackAndReused) {
    KILN_SKIP_WITHOUT_GPU();
    CudaBackend gpu(0);
    Tensor a = ramp({1 << 16}, gpu), b = ramp({1 << 16}, gpu);
    Recorder rec;
    Attach attach(&rec);
    gpu.synchronize();
    const int calls = int(GpuTimeline::kPoolEvents);  // twice the spans one pool holds
    const int64_t t0 = now_ns();
    for (int i = 0; i < calls; ++i) gpu.ops().add_(a, b);
    EXPECT_GE(rec.batches, 1) << "the pool ran out: read back before the wait";
    gpu.synchronize();
    const int64_t t1 = now_ns();
    EXPECT_EQ(rec.gpu_calls()[OpKind::Add], calls);
    expect_well_formed(rec.spans, t0, t1);
}

}  // namespace
}  // namespace kiln::cuda
