// Memory accounting (core/memory.h): tensors count their storage in the right category, copies and
// moves keep the books straight, peaks only rise until reset, and a run of ops leaves the current
// figure where it started.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/memory.h"
#include "core/tensor.h"
#include "kiln/error.h"
#include "ops/ops.h"

using namespace kiln;

namespace {

DeviceMemoryStats cpu() { return memory_stats().device("cpu"); }
int64_t current(MemoryCategory c) { return cpu()[c].current; }
int64_t total() { return cpu().total.current; }
constexpr int64_t kFloat = sizeof(float);

Tensor ramp(const Shape& shape, float scale) {
    Tensor t(shape);
    for (int64_t i = 0; i < t.numel(); ++i) t[i] = scale * static_cast<float>((i * 37) % 101 - 50) / 50.0f;
    return t;
}

}  // namespace

TEST(MemoryAccounting, TensorCountsItsStorageAsActivationsByDefault) {
    const int64_t act = current(MemoryCategory::Activations), tot = total();
    {
        Tensor t({3, 5, 7});
        EXPECT_EQ(current(MemoryCategory::Activations), act + 105 * kFloat);
        EXPECT_EQ(total(), tot + 105 * kFloat);
        Tensor adopted({2, 2}, std::vector<float>{1, 2, 3, 4});
        EXPECT_EQ(current(MemoryCategory::Activations), act + 109 * kFloat);
    }
    EXPECT_EQ(current(MemoryCategory::Activations), act);
    EXPECT_EQ(total(), tot);
}

TEST(MemoryAccounting, CategoryScopeAttributesTensorsAndNests) {
    const int64_t w = current(MemoryCategory::Weights), a = current(MemoryCategory::Activations);
    EXPECT_EQ(current_memory_category(), MemoryCategory::Activations);
    {
        MemoryCategoryScope weights(MemoryCategory::Weights);
        Tensor t({10});
        {
            MemoryCategoryScope ws(MemoryCategory::Workspace);
            EXPECT_EQ(current_memory_category(), MemoryCategory::Workspace);
        }
        EXPECT_EQ(current_memory_category(), MemoryCategory::Weights);
        EXPECT_EQ(current(MemoryCategory::Weights), w + 10 * kFloat);
        EXPECT_EQ(current(MemoryCategory::Activations), a);
    }
    EXPECT_EQ(current_memory_category(), MemoryCategory::Activations);
    EXPECT_EQ(current(MemoryCategory::Weights), w);
}

TEST(MemoryAccounting, CopiesCountInTheCopiersCategoryMovesKeepTheirs) {
    const int64_t w = current(MemoryCategory::Weights), a = current(MemoryCategory::Activations);
    Tensor weight;
    {
        MemoryCategoryScope scope(MemoryCategory::Weights);
        weight = Tensor({4, 4});
    }
    EXPECT_EQ(current(MemoryCategory::Weights), w + 16 * kFloat);
    {
        Tensor copy = weight;  // a new buffer, made while running
        EXPECT_EQ(current(MemoryCategory::Activations), a + 16 * kFloat);
        Tensor moved = std::move(copy);
        EXPECT_EQ(current(MemoryCategory::Activations), a + 16 * kFloat);
        Tensor assigned({2});
        assigned = weight;  // copy assignment: the old 2 floats go, 16 new ones come
        EXPECT_EQ(current(MemoryCategory::Activations), a + 32 * kFloat);
        Tensor reshaped_copy = weight.reshaped({16});
        EXPECT_EQ(current(MemoryCategory::Activations), a + 48 * kFloat);
    }
    EXPECT_EQ(current(MemoryCategory::Activations), a);
    // Reshaping an rvalue hands the storage over: a weight stays a weight, counted once.
    Tensor flat = std::move(weight).reshaped({16});
    EXPECT_EQ(current(MemoryCategory::Weights), w + 16 * kFloat);
    EXPECT_EQ(current(MemoryCategory::Activations), a);
    EXPECT_THROW(std::move(flat).reshaped({3, 5}), Error);
    EXPECT_EQ(current(MemoryCategory::Weights), w + 16 * kFloat);
    flat = Tensor();
    EXPECT_EQ(current(MemoryCategory::Weights), w);
}

TEST(MemoryAccounting, PeaksRiseMonotonicallyAndEqualTheHighestCurrentSeen) {
    reset_memory_peaks();
    const DeviceMemoryStats start = cpu();
    EXPECT_EQ(start.total.peak, start.total.current);
    int64_t highest = start.total.current, last_peak = start.total.peak;
    std::vector<Tensor> held;
    // Grow and shrink in an irregular pattern; after every step the peak must be non-decreasing and
    // exactly the highest current figure seen since the reset (first principles of a high-water mark).
    const int sizes[] = {1000, 5000, -1, 20000, -1, -1, 300, 70000, -1, -1};
    for (int s : sizes) {
        if (s > 0) held.emplace_back(Shape{s});
        else held.erase(held.begin());
        const DeviceMemoryStats now = cpu();
        highest = std::max(highest, now.total.current);
        EXPECT_GE(now.total.peak, last_peak);
        EXPECT_GE(now.total.peak, now.total.current);
        EXPECT_EQ(now.total.peak, highest);
        for (int k = 0; k < kMemoryCategoryCount; ++k) EXPECT_GE(now.categories[k].peak, now.categories[k].current);
        last_peak = now.total.peak;
    }
    held.clear();
    EXPECT_EQ(cpu().total.current, start.total.current);
    EXPECT_EQ(cpu().total.peak, highest);
    reset_memory_peaks();
    EXPECT_EQ(cpu().total.peak, start.total.current);
}

TEST(MemoryAccounting, RunningOpsLeavesCurrentWhereItStarted) {
    const DeviceMemoryStats before = cpu();
    reset_memory_peaks();
    {
        Tensor x = ramp({2, 8, 16, 16}, 1.0f), w = ramp({16, 8, 3, 3}, 0.1f), b = ramp({16}, 0.1f);
        Tensor h = ops::conv2d(x, w, &b, 1, 1);
        Tensor gamma = Tensor::filled({16}, 1.0f), beta({16});
        h = ops::group_norm(h, 4, gamma, beta, 1e-5f);
        ops::silu_(h);
        Tensor tokens = ops::nchw_to_nlc(h);
        Tensor q = ops::linear(tokens, ramp({16, 16}, 0.1f), nullptr);
        Tensor o = ops::attention(q, q, q, 2);
        EXPECT_EQ(o.numel(), 2 * 256 * 16);
    }
    const DeviceMemoryStats after = cpu();
    for (int k = 0; k < kMemoryCategoryCount; ++k)
        EXPECT_EQ(after.categories[k].current, before.categories[k].current) << memory_category_name(MemoryCategory(k));
    EXPECT_EQ(after.total.current, before.total.current);
    // The conv's input and output alone were held at once: 2*8*256 + 2*16*256 floats.
    EXPECT_GE(after.total.peak - before.total.current, (2 * 8 * 256 + 2 * 16 * 256) * kFloat);
}

TEST(MemoryAccounting, LeasesOnOtherDevicesAndRawRecords) {
    const MemoryDevice dev = memory_device("test:0");
    EXPECT_EQ(memory_device("test:0"), dev);
    EXPECT_EQ(memory_device("cpu"), kCpuDevice);
    const int64_t start = memory_stats().device("test:0").total.current;
    {
        MemoryLease staging(4096, MemoryCategory::Staging, dev);
        MemoryLease pinned(100, MemoryCategory::HostPinned, dev);
        const DeviceMemoryStats d = memory_stats().device("test:0");
        EXPECT_EQ(d[MemoryCategory::Staging].current, 4096);
        EXPECT_EQ(d[MemoryCategory::HostPinned].current, 100);
        EXPECT_EQ(d.total.current, start + 4196);
        MemoryLease moved = std::move(staging);
        EXPECT_EQ(staging.bytes(), 0);
        EXPECT_EQ(memory_stats().device("test:0").total.current, start + 4196);
        moved.release();
        EXPECT_EQ(memory_stats().device("test:0").total.current, start + 100);
    }
    EXPECT_EQ(memory_stats().device("test:0").total.current, start);
    record_allocation(kCpuDevice, MemoryCategory::MappedFile, 1 << 20);
    EXPECT_GE(cpu()[MemoryCategory::MappedFile].current, 1 << 20);
    record_release(kCpuDevice, MemoryCategory::MappedFile, 1 << 20);
    record_allocation(kCpuDevice, MemoryCategory::Workspace, -5);  // ignored, as zero is
    EXPECT_EQ(memory_stats().device("never-registered").total.current, 0);
    EXPECT_STREQ(memory_category_name(MemoryCategory::HostPinned), "host_pinned");
}

TEST(MemoryAccounting, WindowPeakTracksTheHighestTotalSinceItsReset) {
    reset_memory_window();
    const int64_t base = memory_window_peak();
    EXPECT_EQ(base, total());
    {
        Tensor big({1 << 18});
    }
    EXPECT_EQ(memory_window_peak(), base + (int64_t(1) << 18) * kFloat);
    const int64_t peak_before = cpu().total.peak;
    reset_memory_window();
    EXPECT_EQ(memory_window_peak(), total());
    EXPECT_EQ(cpu().total.peak, peak_before);  // the window does not touch the reported peaks
}
