// Bad input: every op rejects mismatched shapes with kiln::Error (InvalidArgument) whose message names
// the op and shows the shapes, and never crashes.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "kiln/error.h"
#include "ops/ops.h"
#include "ops/tuning.h"

namespace kiln::ops {
namespace {

// Runs f, which must throw InvalidArgument mentioning every string in `mentions`.
void expect_invalid(const std::function<void()>& f, std::initializer_list<std::string> mentions) {
    try {
        f();
        ADD_FAILURE() << "no error thrown";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
        const std::string msg = e.what();
        for (const std::string& m : mentions) EXPECT_NE(msg.find(m), std::string::npos) << "'" << m << "' not in: " << msg;
    }
}

Tensor t(Shape s) { return Tensor(std::move(s)); }

TEST(OpsErrors, Linear) {
    const Tensor b3 = t({3});
    expect_invalid([] { linear(t({2, 4}), t({3, 5}), nullptr); }, {"linear", "[2, 4]", "[3, 5]"});
    expect_invalid([] { linear(t({2, 4}), t({3, 4, 1}), nullptr); }, {"linear", "[3, 4, 1]"});
    expect_invalid([] { linear(t({}), t({3, 4}), nullptr); }, {"linear"});
    expect_invalid([] { const Tensor b = t({4}); linear(t({2, 4}), t({3, 4}), &b); }, {"linear", "b [4]"});
    expect_invalid([] { const Tensor b = t({3, 1}); linear(t({2, 4}), t({3, 4}), &b); }, {"linear", "[3, 1]"});
}

TEST(OpsErrors, Conv2d) {
    expect_invalid([] { conv2d(t({1, 3, 8}), t({4, 3, 3, 3}), nullptr); }, {"conv2d", "[1, 3, 8]"});
    expect_invalid([] { conv2d(t({1, 3, 8, 8}), t({4, 2, 3, 3}), nullptr); }, {"conv2d", "[1, 3, 8, 8]", "[4, 2, 3, 3]"});
    expect_invalid([] { conv2d(t({1, 3, 8, 8}), t({4, 3, 3, 3}), nullptr, 0); }, {"conv2d", "stride 0"});
    expect_invalid([] { conv2d(t({1, 3, 8, 8}), t({4, 3, 3, 3}), nullptr, 1, -1); }, {"conv2d", "padding -1"});
    expect_invalid([] { conv2d(t({1, 3, 2, 2}), t({4, 3, 3, 3}), nullptr, 1, 0); }, {"conv2d", "smaller than the kernel"});
    expect_invalid([] { conv2d(t({1, 3, 2, 2}), t({4, 3, 0, 3}), nullptr, 1, 1); }, {"conv2d", "empty kernel"});
    expect_invalid([] { const Tensor b = t({5}); conv2d(t({1, 3, 8, 8}), t({4, 3, 3, 3}), &b, 1, 1); }, {"conv2d", "b [5]"});
}

TEST(OpsErrors, Conv2dUpsample2x) {
    expect_invalid([] { conv2d_upsample2x(t({1, 3, 8}), t({4, 3, 3, 3}), nullptr); }, {"conv2d_upsample2x", "[1, 3, 8]"});
    expect_invalid([] { conv2d_upsample2x(t({1, 3, 4, 4}), t({4, 2, 3, 3}), nullptr); },
                   {"conv2d_upsample2x", "[1, 3, 4, 4]", "[4, 2, 3, 3]"});
    // 1x1 upsampled is 2x2: still smaller than a 3x3 kernel without padding.
    expect_invalid([] { conv2d_upsample2x(t({1, 3, 1, 1}), t({4, 3, 3, 3}), nullptr, 1, 0); },
                   {"conv2d_upsample2x", "[1, 3, 1, 1] upsampled 2x", "smaller than the kernel"});
}

TEST(OpsErrors, Conv2dNormSiluOutputModes) {
    const Tensor g4 = Tensor::filled({4}, 1.0f), w = t({4, 4, 3, 3});
    expect_invalid([&] { Tensor y = t({1, 4, 5, 4}); conv2d_group_norm_silu_add_(y, t({1, 4, 5, 5}), 2, g4, g4, 1e-6f, w, nullptr, 1, 1); },
                   {"conv2d_group_norm_silu_add_", "y [1, 4, 5, 4]", "[1, 4, 5, 5]"});
    expect_invalid([&] { Tensor x = t({1, 4, 5, 5}); conv2d_group_norm_silu_add_(x, x, 2, g4, g4, 1e-6f, w, nullptr, 1, 1); },
                   {"conv2d_group_norm_silu_add_", "must not be x"});
    expect_invalid([&] { Tensor y = t({1, 4, 5, 5}); const Tensor b3 = t({3}); conv2d_group_norm_silu_add_(y, t({1, 4, 5, 5}), 2, g4, g4, 1e-6f, w, nullptr, 1, 1, &b3); },
                   {"conv2d_group_norm_silu_add_", "y_bias [3]", "y [1, 4, 5, 5]"});
    expect_invalid([&] { conv2d_group_norm_silu_inplace(t({1, 3, 5, 5}), 1, Tensor::filled({3}, 1.0f), Tensor::filled({3}, 0.0f), 1e-6f, w, nullptr, 1, 1); },
                   {"conv2d_group_norm_silu_inplace", "[1, 3, 5, 5]", "[4, 4, 3, 3]"});
}

TEST(OpsErrors, Norms) {
    const Tensor g32 = t({32}), g31 = t({31});
    expect_invalid([&] { group_norm(t({1, 32, 4, 4}), 5, g32, g32, 1e-5f); }, {"group_norm", "5 groups", "32 channels"});
    expect_invalid([&] { group_norm(t({1, 32, 4, 4}), 0, g32, g32, 1e-5f); }, {"group_norm", "0 groups"});
    expect_invalid([&] { group_norm(t({1, 32, 4, 4}), 8, g31, g32, 1e-5f); }, {"group_norm", "gamma [31]"});
    expect_invalid([&] { group_norm(t({1, 32, 4, 4}), 8, g32, g31, 1e-5f); }, {"group_norm", "beta [31]"});
    expect_invalid([&] { group_norm(t({32}), 8, g32, g32, 1e-5f); }, {"group_norm", "[32]"});
    expect_invalid([&] { group_norm(t({1, 32, 4, 4}), 8, g32, g32, -1.0f); }, {"group_norm", "eps"});
    expect_invalid([&] { layer_norm(t({2, 32}), g31, g32, 1e-5f); }, {"layer_norm", "gamma [31]", "[2, 32]"});
    expect_invalid([&] { layer_norm(t({2, 32}), g32, g31, 1e-5f); }, {"layer_norm", "beta [31]"});
    expect_invalid([&] { layer_norm(t({}), g32, g32, 1e-5f); }, {"layer_norm"});
}

TEST(OpsErrors, Attention) {
    const Tensor q = t({2, 5, 16}), kv = t({2, 7, 16});
    expect_invalid([&] { attention(t({2, 5}), kv, kv, 2); }, {"attention", "[2, 5]"});
    expect_invalid([&] { attention(q, t({1, 7, 16}), t({1, 7, 16}), 2); }, {"attention", "batch"});
    expect_invalid([&] { attention(q, kv, t({2, 6, 16}), 2); }, {"attention", "same length"});
    expect_invalid([&] { attention_qkv(t({2, 5, 16}), 2); }, {"attention_qkv", "[2, 5, 16]"});
    expect_invalid([&] { attention_kv(t({2, 5, 8}), t({2, 6, 8}), 2); }, {"attention_kv", "[2, 6, 8]"});
    expect_invalid([&] { attention_kv(t({2, 5, 8}), t({2, 6, 24}), 2, 9); }, {"attention_kv", "column 9"});
    expect_invalid([&] { attention_kv(t({2, 5, 8}), t({2, 6, 24}), 2, -1); }, {"attention_kv", "column -1"});
    expect_invalid([&] { columns(t({2, 5}), 3, 3); }, {"columns", "[2, 5]"});
    expect_invalid([&] { attention(q, t({2, 7, 8}), t({2, 7, 8}), 2); }, {"attention", "widths"});
    expect_invalid([&] { attention(q, kv, kv, 3); }, {"attention", "heads = 3"});
    expect_invalid([&] { attention(q, kv, kv, 0); }, {"attention", "heads = 0"});
    expect_invalid([&] { attention(q, t({2, 0, 16}), t({2, 0, 16}), 2); }, {"attention", "no keys"});
    expect_invalid([&] { detail::attention_blocked(q, kv, kv, 2, false, -1); }, {"attention", "block_rows"});
}

TEST(OpsErrors, Pointwise) {
    expect_invalid([] { geglu(t({2, 5})); }, {"geglu", "[2, 5]", "even"});
    expect_invalid([] { geglu(t({})); }, {"geglu"});
    expect_invalid([] { Tensor a = t({2, 3}); add_(a, t({3, 2})); }, {"add_", "[2, 3]", "[3, 2]"});
    expect_invalid([] { Tensor a = t({2, 3, 4, 4}); add_channel_bias_(a, t({2, 4})); }, {"add_channel_bias_", "[2, 4]"});
    expect_invalid([] { Tensor a = t({2, 3, 4, 4}); add_channel_bias_(a, t({6})); }, {"add_channel_bias_", "[6]"});
    expect_invalid([] { Tensor a = t({3}); add_channel_bias_(a, t({3, 1})); }, {"add_channel_bias_"});
    expect_invalid([] { softmax_lastdim(t({})); }, {"softmax_lastdim"});
}

TEST(OpsErrors, Layout) {
    expect_invalid([] { upsample_nearest2x(t({2, 3, 4})); }, {"upsample_nearest2x", "[2, 3, 4]"});
    expect_invalid([] { concat_channels(t({2, 3, 4, 4}), t({2, 3, 4, 5})); }, {"concat_channels", "[2, 3, 4, 5]"});
    expect_invalid([] { concat_channels(t({2, 3, 4, 4}), t({1, 3, 4, 4})); }, {"concat_channels"});
    expect_invalid([] { concat_channels(t({2, 3, 4}), t({2, 3, 4, 1})); }, {"concat_channels"});
    expect_invalid([] { concat_channels(t({2}), t({2})); }, {"concat_channels"});
    expect_invalid([] { nchw_to_nlc(t({2, 3, 4})); }, {"nchw_to_nlc", "[2, 3, 4]"});
    expect_invalid([] { nlc_to_nchw(t({2, 12, 3}), 4, 4); }, {"nlc_to_nchw", "[2, 12, 3]", "h = 4"});
    expect_invalid([] { nlc_to_nchw(t({2, 12}), 3, 4); }, {"nlc_to_nchw"});
    expect_invalid([] { nlc_to_nchw(t({2, 12, 3}), -3, -4); }, {"nlc_to_nchw"});
    expect_invalid([] { group_norm_to_nlc(t({2, 4, 3}), 2, t({4}), t({4}), 1e-5f); }, {"group_norm_to_nlc", "[2, 4, 3]"});
    expect_invalid(
        [] {
            Tensor y = t({2, 3, 4, 4});
            add_nlc_(y, t({2, 16, 4}));
        },
        {"add_nlc_", "[2, 16, 4]", "[2, 3, 4, 4]"});
}

TEST(OpsErrors, TimestepEmbedding) {
    expect_invalid([] { timestep_embedding({1.0f}, 0, false, 1.0f); }, {"timestep_embedding", "dim 0"});
    // half_dim - shift = 0 is a division by zero in diffusers too (it would produce NaN).
    expect_invalid([] { timestep_embedding({1.0f}, 2, false, 1.0f); }, {"timestep_embedding", "divides by zero"});
    expect_invalid([] { timestep_embedding({1.0f}, 8, false, 0.0f, 0.0f); }, {"timestep_embedding", "max_period"});
}

}  // namespace
}  // namespace kiln::ops
