// Device discovery and the CUDA error mapping. Discovery must answer on any machine: with no driver or
// no GPU an empty list and a reason, never an exception or a crash.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "backends/cuda/cuda_allocator.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_info.h"
#include "kiln/error.h"

namespace kiln::cuda {
namespace {

TEST(CudaDevice, ListsDevicesOrSaysWhyNot) {
    std::string why;
    std::vector<DeviceInfo> devices;
    ASSERT_NO_THROW(devices = cuda_devices(&why));
    if (devices.empty()) {
        EXPECT_FALSE(why.empty()) << "an empty list must come with a reason";
        GTEST_SKIP() << "no CUDA GPU on this machine: " << why;
    }
    for (size_t i = 0; i < devices.size(); ++i) {
        const DeviceInfo& d = devices[i];
        std::printf("[ device   ] %d: %s, compute capability %d.%d, %d multiprocessors, %.1f GiB free of %.1f GiB\n",
                    d.index, d.name.c_str(), d.cc_major, d.cc_minor, d.multiprocessors, d.free_bytes / 1073741824.0,
                    d.total_bytes / 1073741824.0);
        EXPECT_EQ(d.index, int(i));
        EXPECT_FALSE(d.name.empty());
        EXPECT_GE(d.cc_major, 5);
        EXPECT_GT(d.multiprocessors, 0);
        EXPECT_GT(d.total_bytes, 0u);
        EXPECT_GT(d.free_bytes, 0u);
        EXPECT_LE(d.free_bytes, d.total_bytes);
    }
}

TEST(CudaDevice, RepeatedCallsAgree) {
    std::string why1, why2;
    const auto a = cuda_devices(&why1);
    const auto b = cuda_devices(&why2);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].name, b[i].name);
        EXPECT_EQ(a[i].total_bytes, b[i].total_bytes);
    }
    EXPECT_NO_THROW(cuda_devices());  // the reason is optional
}

TEST(CudaCheck, MapsErrorsToKindsAndNamesTheCall) {
    try {
        KILN_CUDA_CHECK(cudaErrorMemoryAllocation);
        FAIL() << "no exception";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory);
        const std::string msg = e.what();
        EXPECT_NE(msg.find("cudaErrorMemoryAllocation"), std::string::npos) << msg;
        EXPECT_NE(msg.find("device_cuda_test.cpp"), std::string::npos) << msg;
    }
    EXPECT_EQ(error_kind_of(cudaErrorInvalidValue), ErrorKind::InvalidArgument);
    EXPECT_EQ(error_kind_of(cudaErrorNoDevice), ErrorKind::Unsupported);
    EXPECT_NO_THROW(KILN_CUDA_CHECK(cudaSuccess));
}

TEST(CudaCheck, AHugeAllocationIsOutOfMemory) {
    if (cuda_devices().empty()) GTEST_SKIP() << "no CUDA GPU on this machine";
    void* p = nullptr;
    try {
        KILN_CUDA_CHECK(cudaMalloc(&p, size_t(1) << 50));  // 1 PiB
        cudaFree(p);
        FAIL() << "a 1 PiB allocation succeeded";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory) << e.what();
        EXPECT_NE(std::string(e.what()).find("cudaMalloc"), std::string::npos) << e.what();
    }
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // allocation failures are not sticky
}

// Under a cap (--vram), a request that needs a new block gives back the smallest cached block that makes room for it
// (else the largest ones until there is room), not the whole cache: the others stay cached for the sizes that use
// them, with no wait for the device and no cudaMalloc when those come again.
TEST(CudaAllocator, AtItsCapGivesBackOnlyWhatItMust) {
    if (cuda_devices().empty()) GTEST_SKIP() << "no CUDA GPU on this machine";
    KILN_CUDA_CHECK(cudaSetDevice(0));
    constexpr int64_t MiB = int64_t(1) << 20;
    CudaAllocator a(0);
    a.set_limit(64 * MiB);
    void* big = a.allocate(32 * MiB);
    void* mid = a.allocate(16 * MiB);
    void* small = a.allocate(8 * MiB);
    for (void* p : {big, mid, small}) a.deallocate(p);
    ASSERT_EQ(a.reserved_bytes(), 56 * MiB);
    EXPECT_EQ(a.counts().device_allocations, 3);
    EXPECT_EQ(a.counts().give_backs, 0);
    // 20 MiB (no cached block within a quarter of it): 56 + 20 is 12 past the cap; the 16 MiB block is the smallest
    // that covers that alone, so it goes, and the 32 and 8 MiB blocks stay cached.
    void* twenty = a.allocate(20 * MiB);
    EXPECT_EQ(a.reserved_bytes(), 60 * MiB);
    EXPECT_EQ(a.allocate(32 * MiB), big);
    EXPECT_EQ(a.allocate(8 * MiB), small);
    EXPECT_EQ(a.reserved_bytes(), 60 * MiB);
    // Counted for --profile (core/allocator_counts.h): one more cudaMalloc, one give-back of one block.
    EXPECT_EQ(a.counts().device_allocations, 4);
    EXPECT_EQ(a.counts().give_backs, 1);
    EXPECT_EQ(a.counts().blocks_given_back, 1);
    EXPECT_GT(a.counts().give_back_ms, 0.0);
    // Nothing cached and 60 + 8 past the cap: OutOfMemory naming it.
    try {
        a.allocate(8 * MiB);
        ADD_FAILURE() << "an allocation past the cap with nothing cached succeeded";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory) << e.what();
        EXPECT_NE(std::string(e.what()).find("--vram"), std::string::npos) << e.what();
    }
    for (void* p : {twenty, big, small}) a.deallocate(p);
}

// KILN_CUDA_SPLIT_BLOCKS=1: at the cap a request is cut from a larger free block instead of a cached block going
// back to the driver (session 28's capped q4_K run gave back a cached 40 MiB block for a 16 MiB request); freed,
// the parts merge and serve the whole size again; a segment whose blocks are all free is what goes back.
TEST(CudaAllocator, SplitBlocksAreCutAtTheCapAndMergeWhenFreed) {
    if (cuda_devices().empty()) GTEST_SKIP() << "no CUDA GPU on this machine";
    KILN_CUDA_CHECK(cudaSetDevice(0));
    constexpr int64_t MiB = int64_t(1) << 20;
    CudaAllocator a(0);
    a.set_split_policy(SplitPolicy::Always);
    a.set_limit(64 * MiB);
    char* forty = static_cast<char*>(a.allocate(40 * MiB));
    void* twenty = a.allocate(20 * MiB);
    a.deallocate(forty);
    ASSERT_EQ(a.reserved_bytes(), 60 * MiB);
    const AllocatorCounts before = a.counts();
    // 60 + 16 is past the cap: cut from the free 40 MiB block, and 24 MiB more from what is left of it.
    char* sixteen = static_cast<char*>(a.allocate(16 * MiB));
    char* twenty_four = static_cast<char*>(a.allocate(24 * MiB));
    EXPECT_EQ(sixteen, forty);
    EXPECT_EQ(twenty_four, forty + 16 * MiB);
    EXPECT_EQ(a.counts().since(before).device_allocations, 0);
    EXPECT_EQ(a.counts().since(before).give_backs, 0);
    EXPECT_EQ(a.live_bytes(), 60 * MiB);
    EXPECT_EQ(a.reserved_bytes(), 60 * MiB);
    // Two parts of one allocation, written apart.
    KILN_CUDA_CHECK(cudaMemset(sixteen, 1, size_t(16 * MiB)));
    KILN_CUDA_CHECK(cudaMemset(twenty_four, 2, size_t(24 * MiB)));
    unsigned char edge[2] = {0, 0};
    KILN_CUDA_CHECK(cudaMemcpy(edge, twenty_four - 1, 2, cudaMemcpyDeviceToHost));
    EXPECT_EQ(edge[0], 1);
    EXPECT_EQ(edge[1], 2);
    // Freed, the parts are one block again.
    a.deallocate(sixteen);
    a.deallocate(twenty_four);
    EXPECT_EQ(a.allocate(40 * MiB), forty);
    EXPECT_EQ(a.counts().since(before).device_allocations, 0);
    // 22 MiB with nothing free that holds it, 18 past the cap: the 20 MiB segment, all free, goes back.
    a.deallocate(twenty);
    void* twenty_two = a.allocate(22 * MiB);
    EXPECT_EQ(a.counts().since(before).give_backs, 1);
    EXPECT_EQ(a.counts().since(before).blocks_given_back, 1);
    EXPECT_EQ(a.counts().since(before).device_allocations, 1);
    EXPECT_EQ(a.reserved_bytes(), 62 * MiB);
    a.deallocate(twenty_two);
    a.deallocate(forty);
    a.release_cached();
    EXPECT_EQ(a.reserved_bytes(), 0);
}

// The default, cutting only without a cap (SplitPolicy::WhileUncapped), across a cap set and lifted mid-run (a run
// that ran out goes on under --vram auto): under the cap a whole request is served from a cut segment's free room
// before the driver is asked; with the cap lifted, a whole block cached under it becomes a segment to cut from.
TEST(CudaAllocator, ACapSetAndLiftedMidRunReusesWhatIsHeld) {
    if (cuda_devices().empty()) GTEST_SKIP() << "no CUDA GPU on this machine";
    KILN_CUDA_CHECK(cudaSetDevice(0));
    constexpr int64_t MiB = int64_t(1) << 20;
    CudaAllocator a(0);
    a.set_split_policy(SplitPolicy::WhileUncapped);
    char* forty = static_cast<char*>(a.allocate(40 * MiB));  // cut path: a segment of its own
    void* eight = a.allocate(8 * MiB);
    a.deallocate(forty);
    a.set_limit(48 * MiB);
    AllocatorCounts before = a.counts();
    // 48 + 16 is past the cap; the free 40 MiB segment holds it: no give-back, no new allocation.
    char* sixteen = static_cast<char*>(a.allocate(16 * MiB));
    EXPECT_EQ(sixteen, forty);
    EXPECT_EQ(a.counts().since(before).device_allocations, 0);
    EXPECT_EQ(a.counts().since(before).give_backs, 0);
    EXPECT_EQ(a.reserved_bytes(), 48 * MiB);
    a.deallocate(sixteen);
    a.deallocate(eight);
    a.release_cached();
    ASSERT_EQ(a.reserved_bytes(), 0);

    // Under the cap a 20 MiB block is served whole and cached when freed; lifted, a 12 MiB and then an 8 MiB
    // request are cut from it.
    a.set_limit(64 * MiB);
    char* twenty = static_cast<char*>(a.allocate(20 * MiB));
    a.deallocate(twenty);
    a.set_limit(0);
    before = a.counts();
    char* twelve = static_cast<char*>(a.allocate(12 * MiB));
    char* eight_more = static_cast<char*>(a.allocate(8 * MiB));
    EXPECT_EQ(twelve, twenty);
    EXPECT_EQ(eight_more, twenty + 12 * MiB);
    EXPECT_EQ(a.counts().since(before).device_allocations, 0);
    EXPECT_EQ(a.reserved_bytes(), 20 * MiB);
    EXPECT_EQ(a.live_bytes(), 20 * MiB);
    a.deallocate(twelve);
    a.deallocate(eight_more);
    a.release_cached();
    EXPECT_EQ(a.reserved_bytes(), 0);
}

}  // namespace
}  // namespace kiln::cuda
