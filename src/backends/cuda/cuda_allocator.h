// Device memory for one GPU, cached so that the steady state makes no cudaMalloc: a freed block goes back
// to a free list and the next request of about its size takes it (PyTorch's caching allocator does the same).
// Blocks belong to pools. Pool 0 serves ordinary work; a recorded call (CUDA graph) gets a pool of its own
// for as long as the recording lives, because the graph's kernels keep the addresses they were captured with
// and nothing else may be handed those blocks.
// Not thread-safe: the backend calls it from the thread that runs its stream.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/allocator_counts.h"
#include "core/host_timer.h"
#include "core/split_blocks.h"

namespace kiln::cuda {

class CudaAllocator {
public:
    explicit CudaAllocator(int device) : device_(device), name_("cuda:" + std::to_string(device)), free_(1) {}
    ~CudaAllocator();
    CudaAllocator(const CudaAllocator&) = delete;
    CudaAllocator& operator=(const CudaAllocator&) = delete;

    // From the current pool; bytes > 0. Out of memory after giving back every cached block: OutOfMemory
    // naming the bytes asked and the device's free and total memory.
    void* allocate(int64_t bytes);
    void deallocate(void* p) noexcept;  // back to the free list of the block's pool

    int new_pool();
    void set_current_pool(int pool) { current_ = pool; }
    int current_pool() const { return current_; }
    // Returns the pool's blocks to the device (they must all be free, or be freed later: a live block of a
    // released pool is given back when it is deallocated). Synchronises the device.
    void release_pool(int pool) noexcept;

    int64_t reserved_bytes() const { return reserved_; }  // held from the device: live + cached
    // A cap on reserved_bytes() (0: none, the default): a request past it gives cached blocks back until it fits
    // (core/cache_give_back.h chooses which); else it is OutOfMemory naming the cap (--vram).
    void set_limit(int64_t bytes) { limit_ = bytes; }
    int64_t limit() const { return limit_; }
    // Every free block of pool 0 and of released pools back to the device, and every cut segment whose blocks are
    // all free (a live recording's pool keeps its blocks). Synchronises the device.
    void release_cached() noexcept;
    int64_t live_bytes() const { return live_bytes_ + split_.live_bytes(); }
    // cudaMalloc calls, and give-backs of cached blocks (make_room, release_cached), since the allocator was made.
    const AllocatorCounts& counts() const { return counts_; }

    // The size a request is served with: 512-byte granules below 1 MiB, 2 MiB granules above, so that
    // blocks of near sizes are interchangeable.
    static int64_t rounded(int64_t bytes);

    // When requests of 1 MiB and more are cut from larger free blocks, which merge again when freed
    // (core/split_blocks.h), instead of taking a cached block at most a quarter larger than they are (the backend's
    // default: while there is no cap; KILN_CUDA_SPLIT_BLOCKS). Blocks already given keep the way they were given.
    void set_split_policy(SplitPolicy policy) { split_policy_ = policy; }

private:
    // Gives cached blocks back (those release_cached may) until `size` more bytes fit the limit.
    void make_room(int64_t size) noexcept;
    // Room for `size` more bytes under the limit, by make_room, else OutOfMemory naming the cap.
    void fit_limit(int64_t bytes, int64_t size);
    // `size` bytes from the driver (the cache given back and asked again when it has none), else OutOfMemory.
    void* from_driver(int64_t bytes, int64_t size);
    void* allocate_split(int64_t bytes, int64_t size);
    // Whether a segment of `pool` may go back to the driver now (pool 0, or a released recording's).
    bool givable(int pool) const { return pool == 0 || released_[size_t(pool)]; }
    struct Block {
        int64_t size;
        int pool;
    };
    int device_;
    std::string name_;  // "cuda:N", as KILN_FAIL_ALLOCATION_AT names the device
    int current_ = 0;
    std::unordered_map<void*, Block> live_;
    std::vector<std::multimap<int64_t, void*>> free_;  // per pool: size -> block
    std::vector<bool> released_{false};
    int64_t reserved_ = 0, live_bytes_ = 0, limit_ = 0;
    AllocatorCounts counts_;
    SplitPolicy split_policy_ = SplitPolicy::Never;
    SplitBlocks split_{int64_t(2) << 20};  // the blocks of 1 MiB and more that were cut (split_policy_)
};

}  // namespace kiln::cuda
