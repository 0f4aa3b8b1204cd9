// The op list and the observer hook: names are unique and match the list, every op reports exactly one
// begin/end pair with the right kind, and linear/conv2d/attention report 2*M*N*K FLOPs.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "ops/ops.h"

namespace kiln::ops {
namespace {

TEST(OpTable, NamesAreTheFunctionNames) {
    EXPECT_EQ(kOpCount, 19);
    std::set<std::string> names;
    for (int i = 0; i < kOpCount; ++i) names.insert(op_name(static_cast<OpKind>(i)));
    EXPECT_EQ(static_cast<int>(names.size()), kOpCount) << "duplicate names";
    EXPECT_STREQ(op_name(OpKind::Linear), "linear");
    EXPECT_STREQ(op_name(OpKind::Silu), "silu_");
    EXPECT_STREQ(op_name(OpKind::TimestepEmbedding), "timestep_embedding");
    EXPECT_STREQ(op_name(static_cast<OpKind>(kOpCount)), "unknown");
    EXPECT_STREQ(op_name(static_cast<OpKind>(-1)), "unknown");
}

struct Recorder : OpObserver {
    struct Event {
        bool begin;
        OpKind kind;
        double flops;
    };
    std::vector<Event> events;
    void begin(OpKind kind, double flops) override { events.push_back({true, kind, flops}); }
    void end(OpKind kind) override { events.push_back({false, kind, 0.0}); }
};

// Installs a recorder for one scope; always uninstalls, even when the test fails.
struct Observed {
    Recorder rec;
    Observed() { set_op_observer(&rec); }
    ~Observed() { set_op_observer(nullptr); }
};

void expect_one_call(const Recorder& rec, OpKind kind, double flops) {
    ASSERT_EQ(rec.events.size(), 2u) << op_name(kind);
    EXPECT_TRUE(rec.events[0].begin);
    EXPECT_EQ(rec.events[0].kind, kind);
    EXPECT_EQ(rec.events[0].flops, flops) << op_name(kind);
    EXPECT_FALSE(rec.events[1].begin);
    EXPECT_EQ(rec.events[1].kind, kind);
}

TEST(OpObserverHook, EveryOpReportsOnce) {
    const Tensor x4 = Tensor::filled({2, 4, 3, 5}, 0.5f);
    const Tensor c4 = Tensor::filled({4}, 1.0f);
    auto observe = [](auto&& f, OpKind kind, double flops) {
        Observed o;
        f();
        expect_one_call(o.rec, kind, flops);
    };
    // linear: M = 2*7 rows, N = 6 outputs, K = 5 inputs.
    observe([] { linear(Tensor({2, 7, 5}), Tensor({6, 5}), nullptr); }, OpKind::Linear, 2.0 * 14 * 6 * 5);
    // conv2d: per image, M = 8 output channels, N = 3*5 pixels, K = 4*3*3.
    observe([&] { conv2d(x4, Tensor({8, 4, 3, 3}), nullptr, 1, 1); }, OpKind::Conv2d, 2.0 * 2 * 8 * 15 * 36);
    // The fused upsampling is timed as conv2d on the upsampled input: N = 6*10 pixels.
    observe([&] { conv2d_upsample2x(x4, Tensor({8, 4, 3, 3}), nullptr, 1, 1); }, OpKind::Conv2d,
            2.0 * 2 * 8 * 60 * 36);
    // attention: q k^T and p v, each 2 * Lq * Lk * D per (batch, head).
    observe([] { attention(Tensor({2, 9, 16}), Tensor({2, 11, 16}), Tensor({2, 11, 16}), 4); }, OpKind::Attention,
            2 * 4 * (2.0 * 9 * 11 * 4) * 2);
    observe([&] { group_norm(x4, 2, c4, c4, 1e-5f); }, OpKind::GroupNorm, 0);
    observe([] { layer_norm(Tensor({3, 4}), Tensor({4}), Tensor({4}), 1e-5f); }, OpKind::LayerNorm, 0);
    observe([&] { Tensor y = x4; silu_(y); }, OpKind::Silu, 0);
    observe([&] { Tensor y = x4; gelu_(y); }, OpKind::Gelu, 0);
    observe([&] { Tensor y = x4; gelu_tanh_(y); }, OpKind::GeluTanh, 0);
    observe([&] { Tensor y = x4; quick_gelu_(y); }, OpKind::QuickGelu, 0);
    observe([] { geglu(Tensor({2, 3, 8})); }, OpKind::Geglu, 0);
    observe([&] { upsample_nearest2x(x4); }, OpKind::UpsampleNearest2x, 0);
    observe([&] { concat_channels(x4, x4); }, OpKind::ConcatChannels, 0);
    observe([&] { Tensor y = x4; add_(y, x4); }, OpKind::Add, 0);
    observe([&] { Tensor y = x4; add_channel_bias_(y, Tensor({2, 4})); }, OpKind::AddChannelBias, 0);
    observe([&] { Tensor y = x4; scale_(y, 2.0f); }, OpKind::Scale, 0);
    observe([&] { nchw_to_nlc(x4); }, OpKind::NchwToNlc, 0);
    observe([] { nlc_to_nchw(Tensor({2, 15, 4}), 3, 5); }, OpKind::NlcToNchw, 0);
    observe([&] { softmax_lastdim(x4); }, OpKind::SoftmaxLastdim, 0);
    observe([] { timestep_embedding({1.0f}, 8, true, 0.0f); }, OpKind::TimestepEmbedding, 0);
}

TEST(OpObserverHook, RejectedInputIsNotReported) {
    Observed o;
    EXPECT_THROW(linear(Tensor({2, 4}), Tensor({3, 5}), nullptr), Error);
    EXPECT_TRUE(o.rec.events.empty());
}

TEST(OpObserverHook, OffByDefault) { EXPECT_EQ(op_observer(), nullptr); }

// Ops do not call other public ops, so a profiler sees no nested pairs.
TEST(OpObserverHook, GegluDoesNotReportAGelu) {
    Observed o;
    geglu(Tensor({2, 8}));
    expect_one_call(o.rec, OpKind::Geglu, 0);
}

}  // namespace
}  // namespace kiln::ops
