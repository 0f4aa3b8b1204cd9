// Device memory of one Vulkan device, cached like the CUDA allocator (no vkAllocateMemory in the steady
// state). Every block is named by its buffer device address, which the backend hands out as the tensor's
// pointer: offsets into a tensor are plain arithmetic on the host and shaders read through the address, so
// no descriptor sets and no maxStorageBufferRange limit. Requests under 4 MiB are cut from 64 MiB slabs
// (smaller under a --vram cap; drivers allow only a few thousand allocations) and merge again when freed; larger
// ones are cut from larger free allocations or get one of their own (set_split_policy). An allocation whose parts
// are all free, a slab too, can be given back to the driver when memory runs short.
// Limits (docs/VULKAN.md, "Allocation limits"), each an OutOfMemory error naming it: one allocation
// (maxMemoryAllocationSize / maxBufferSize, or KILN_VULKAN_MAX_ALLOCATION), one kernel operand (max_binding: the
// kernels' 32-bit indices, or KILN_VULKAN_MAX_BINDING), the heap budget (VK_EXT_memory_budget).
// Blocks belong to pools, as in the CUDA allocator: pool 0 serves ordinary work, a recorded call gets a pool of
// its own for as long as the recording lives (its command buffer keeps the addresses it was recorded with).
// Not thread-safe: the backend calls it from the thread that records its commands.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <unordered_map>
#include <vector>

#include "backends/vulkan/physical_devices.h"
#include "core/allocator_counts.h"
#include "core/host_timer.h"
#include "core/split_blocks.h"

namespace kiln::vulkan {

// The most values one kernel operand may hold: 32-bit indices, less the elementwise kernels' grid step
// (65535 x 256, common.glsl), so that no loop index wraps.
constexpr int64_t kMaxKernelValues = (int64_t(1) << 32) - int64_t(65535) * 256;

// An environment setting's byte size: digits and an optional K, M or G (binary); unset: 0; else InvalidArgument.
int64_t byte_size_from_env(const char* name);

class VulkanMemory {
public:
    // wait_idle: waits until the device has finished all submitted work (before memory goes back).
    VulkanMemory(VkDevice device, const PhysicalDevice& physical, std::string name, std::function<void()> wait_idle);
    ~VulkanMemory();
    VulkanMemory(const VulkanMemory&) = delete;
    VulkanMemory& operator=(const VulkanMemory&) = delete;

    void* allocate(int64_t bytes);  // bytes > 0; the block's device address
    void deallocate(void* p) noexcept;

    struct Location {
        VkBuffer buffer;
        VkDeviceSize offset;
    };
    // The buffer and offset of a device address inside a live block (for copy commands).
    Location locate(const void* address) const;

    int64_t reserved_bytes() const { return reserved_; }
    // Caps what is held from the device, slabs and cache included (--vram; 0: no cap): past it cached allocations
    // and slabs no block uses go back to the driver until the request fits (core/cache_give_back.h chooses which), else the
    // request is OutOfMemory naming the cap.
    void set_limit(int64_t bytes) { limit_ = bytes; }
    int64_t limit() const { return limit_; }
    // Dedicated allocations and slabs no block uses go back to the driver.
    void release_cached() noexcept { release_free_chunks(); }
    // vkAllocateMemory calls, and give-backs of cached allocations (make_room, release_cached), so far.
    const AllocatorCounts& counts() const { return counts_; }
    // The largest allocation (0: none stated); the bytes of `elem`-byte values one kernel operand may span.
    int64_t max_allocation() const { return max_allocation_; }
    int64_t max_binding(int64_t elem) const;
    // For tests, as the environment settings do (0 lifts the forced binding limit).
    void set_max_allocation(int64_t bytes) {
        forced_allocation_ = bytes < driver_max_allocation();
        max_allocation_ = bytes;
    }
    void set_max_binding(int64_t bytes) { max_binding_ = bytes; }
    bool forced_binding() const { return max_binding_ > 0; }
    int64_t driver_max_allocation() const { return static_cast<int64_t>(physical_.max_allocation); }

    // When requests of 4 MiB and more are cut from larger free allocations, which merge again when freed
    // (core/split_blocks.h), instead of each taking a cached allocation at most a quarter larger or one of its own
    // (the backend's default: always; KILN_VULKAN_SPLIT_BLOCKS; docs/MEMORY.md).
    void set_split_policy(SplitPolicy policy) { split_policy_ = policy; }
    SplitPolicy split_policy() const { return split_policy_; }

    int new_pool();
    void set_current_pool(int pool) { current_ = pool; }
    // The pool's free blocks join pool 0, and its live blocks will when they are freed.
    void release_pool(int pool) noexcept;

private:
    struct Block {
        int64_t size;
        int pool;
    };
    struct Chunk {
        VkDeviceMemory memory;
        VkBuffer buffer;
        int64_t size;
        bool slab;
    };
    int64_t slab_bytes() const;  // the size of a new slab
    uint64_t new_chunk(int64_t size, bool slab);  // its address; OutOfMemory when the driver refuses
    void release_free_chunks() noexcept;  // allocations and slabs no block uses back to the driver
    void free_chunk(uint64_t address) noexcept;  // one back to the driver (after a wait for the device; not counted)
    void make_room(int64_t missing) noexcept;  // some of them, until `missing` bytes went
    bool waited_idle() noexcept;  // wait_idle_, false where it could not (inside a recording)
    [[noreturn]] void out_of_memory(int64_t bytes, const std::string& why) const;

    VkDevice device_;
    const PhysicalDevice& physical_;
    std::string name_;
    std::function<void()> wait_idle_;
    uint32_t memory_type_ = UINT32_MAX;
    int64_t max_allocation_ = 0;
    bool forced_allocation_ = false;
    int64_t max_binding_ = 0;  // KILN_VULKAN_MAX_BINDING (0: only the kernels' index range)
    AllocatorCounts counts_;
    SplitPolicy split_policy_ = SplitPolicy::Never;
    SplitBlocks split_{int64_t(4) << 20};  // the dedicated allocations' blocks, where cut (split_policy_; a rest under
                                           // 4 MiB would serve no request: those go to slabs)
    std::map<uint64_t, Chunk> chunks_;  // by base address
    SplitBlocks small_{512};  // the slabs' blocks (pool 0 here; a live recording keeps its freed ones in free_)
    std::unordered_map<uint64_t, Block> live_;  // by address: the blocks not cut by split_
    int64_t live_plain_bytes_ = 0;  // the bytes of live_'s blocks
    std::vector<std::multimap<int64_t, uint64_t>> free_{1};  // per pool: block size -> address
    std::vector<bool> released_{false};
    int current_ = 0;
    int64_t reserved_ = 0;
    int64_t limit_ = 0;
};

}  // namespace kiln::vulkan
