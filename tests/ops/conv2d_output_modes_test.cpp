// What conv2d_group_norm_silu_add_ and conv2d_group_norm_silu_inplace are for: memory. The in-place
// op returns its result in its input's storage and the add makes no output tensor, so neither adds an
// activation at any moment (only scratch, counted as workspace); where the in-place op cannot write
// over its input it makes a new tensor, which the same accounting sees. Their values are checked
// bit for bit in ops_vs_reference_test.cpp.
#include <gtest/gtest.h>

#include "core/memory.h"
#include "harness.h"
#include "ops/ops.h"

namespace kiln::ops::testing {
namespace {

int64_t activations_now() { return memory_stats().device("cpu")[MemoryCategory::Activations].current; }
int64_t activations_peak() { return memory_stats().device("cpu")[MemoryCategory::Activations].peak; }

struct NormConv {
    Tensor gamma = random_tensor({8}, 1, 0.5f, 1.5f), beta = random_tensor({8}, 2);
    Tensor w = random_tensor({4, 8, 3, 3}, 3), b = random_tensor({4}, 4);
};

TEST(Conv2dOutputModes, InplaceWritesOverItsInput) {
    const NormConv p;
    Tensor x = random_tensor({1, 8, 32, 24}, 5);
    const float* storage = x.data();
    const int64_t before = activations_now();
    reset_memory_peaks();
    Tensor y = conv2d_group_norm_silu_inplace(std::move(x), 4, p.gamma, p.beta, 1e-6f, p.w, &p.b, 1, 1);
    EXPECT_EQ(y.shape(), (Shape{1, 4, 32, 24}));
    EXPECT_EQ(y.data(), storage);
    EXPECT_EQ(activations_peak(), before);
    EXPECT_EQ(activations_now(), before);  // x's storage, all of it, is y's
    y = Tensor();
    EXPECT_EQ(activations_now(), before - 8 * 32 * 24 * 4);
}

TEST(Conv2dOutputModes, InplaceMakesANewTensorForTwoImages) {
    const NormConv p;
    Tensor x = random_tensor({2, 8, 6, 5}, 6);
    const float* storage = x.data();
    const int64_t before = activations_now();
    reset_memory_peaks();
    const Tensor y = conv2d_group_norm_silu_inplace(std::move(x), 4, p.gamma, p.beta, 1e-6f, p.w, &p.b, 1, 1);
    EXPECT_NE(y.data(), storage);
    EXPECT_EQ(activations_peak(), before + 2 * 4 * 6 * 5 * 4);  // x and y at once
}

TEST(Conv2dOutputModes, AddMakesNoOutputTensor) {
    const NormConv p;
    const Tensor x = random_tensor({2, 8, 32, 24}, 7);
    Tensor y = random_tensor({2, 4, 32, 24}, 8);
    const int64_t before = activations_now();
    reset_memory_peaks();
    conv2d_group_norm_silu_add_(y, x, 4, p.gamma, p.beta, 1e-6f, p.w, &p.b, 1, 1);
    EXPECT_EQ(activations_peak(), before);
    EXPECT_GT(memory_stats().device("cpu")[MemoryCategory::Workspace].peak, 0);
}

}  // namespace
}  // namespace kiln::ops::testing
