#include "backends/vulkan/vulkan_memory.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "core/allocation_faults.h"
#include "core/cache_give_back.h"
#include "kiln/error.h"

namespace kiln::vulkan {

namespace {
constexpr int64_t kMiB = int64_t(1) << 20;
constexpr int64_t kSlab = 64 * kMiB, kSmall = 4 * kMiB;
std::string mib(int64_t bytes) { return std::to_string((bytes + kMiB / 2) / kMiB) + " MiB"; }
// 512-byte granules below 1 MiB (and 256-byte aligned addresses), 2 MiB granules above: near sizes share blocks.
int64_t rounded(int64_t bytes) {
    const int64_t granule = bytes < kMiB ? 512 : 2 * kMiB;
    return (bytes + granule - 1) / granule * granule;
}
constexpr VkBufferUsageFlags kUsage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
}  // namespace

int64_t byte_size_from_env(const char* name) {
    const char* env = std::getenv(name);
    if (!env || !*env) return 0;
    const std::string s = env;
    size_t digits = 0;
    while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
    const std::string suffix = s.substr(digits);
    const int shift = suffix.empty() ? 0 : suffix == "K" ? 10 : suffix == "M" ? 20 : suffix == "G" ? 30 : -1;
    require(digits > 0 && digits <= 12 && shift >= 0, ErrorKind::InvalidArgument,
            std::string(name) + "=" + s + ": a size in bytes expected, with an optional K, M or G (e.g. 64M)");
    return std::stoll(s.substr(0, digits)) << shift;
}

VulkanMemory::VulkanMemory(VkDevice device, const PhysicalDevice& physical, std::string name,
                           std::function<void()> wait_idle)
    : device_(device), physical_(physical), name_(std::move(name)), wait_idle_(std::move(wait_idle)) {
    max_allocation_ = static_cast<int64_t>(physical.max_allocation);
    const int64_t forced = byte_size_from_env("KILN_VULKAN_MAX_ALLOCATION");
    forced_allocation_ = forced > 0 && (max_allocation_ == 0 || forced < max_allocation_);
    if (forced_allocation_) max_allocation_ = forced;
    max_binding_ = byte_size_from_env("KILN_VULKAN_MAX_BINDING");
}

int64_t VulkanMemory::max_binding(int64_t elem) const {
    const int64_t values = kMaxKernelValues * elem;
    return max_binding_ > 0 ? std::min(max_binding_, values) : values;
}

VulkanMemory::~VulkanMemory() {
    const Api& a = api();
    for (auto& [address, c] : chunks_) {
        a.vkDestroyBuffer(device_, c.buffer, nullptr);
        a.vkFreeMemory(device_, c.memory, nullptr);
    }
}

[[noreturn]] void VulkanMemory::out_of_memory(int64_t bytes, const std::string& why) const {
    const DeviceMemoryInfo m = heap_memory(physical_, reserved_);
    fail(ErrorKind::OutOfMemory, name_ + ": out of memory: asked for " + mib(bytes) + ", " + mib(m.free) +
                                     " free of " + mib(m.total) + " (kiln holds " + mib(reserved_) + ")" + why);
}

uint64_t VulkanMemory::new_chunk(int64_t size, bool slab) {
    if (max_allocation_ > 0 && size > max_allocation_)
        out_of_memory(size, "; the driver allows at most " + mib(max_allocation_) + " in one allocation");
    if (limit_ > 0 && reserved_ + size > limit_) {
        make_room(reserved_ + size - limit_);
        if (reserved_ + size > limit_)
            fail(ErrorKind::OutOfMemory, name_ + ": the memory limit of " + mib(limit_) + " (--vram) is reached: asked for " +
                                             mib(size) + ", kiln holds " + mib(reserved_) + " (" +
                                             mib(split_.live_bytes() + live_plain_bytes_) + " of it in use)");
    }
    // The driver's budget (VK_EXT_memory_budget): past it a driver may page or fail later, so kiln stops there.
    if (physical_.memory_budget && size > heap_memory(physical_, reserved_).free) {
        release_free_chunks();
        if (size > heap_memory(physical_, reserved_).free)
            out_of_memory(size, "; past the driver's memory budget (VK_EXT_memory_budget)");
    }
    const Api& a = api();
    VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    info.size = static_cast<VkDeviceSize>(size);
    info.usage = kUsage;
    info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    VkBuffer buffer = VK_NULL_HANDLE;
    check(a.vkCreateBuffer(device_, &info, nullptr, &buffer), "vkCreateBuffer of " + mib(size));
    VkMemoryRequirements req;
    a.vkGetBufferMemoryRequirements(device_, buffer, &req);
    if (memory_type_ == UINT32_MAX) {  // device-local memory of the main heap, else anything the buffer takes
        VkPhysicalDeviceMemoryProperties mem;
        a.vkGetPhysicalDeviceMemoryProperties(physical_.handle, &mem);
        for (uint32_t i = 0; i < mem.memoryTypeCount && memory_type_ == UINT32_MAX; ++i)
            if ((req.memoryTypeBits & (1u << i)) && mem.memoryTypes[i].heapIndex == physical_.device_local_heap &&
                (mem.memoryTypes[i].propertyFlags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT))
                memory_type_ = i;
        for (uint32_t i = 0; i < mem.memoryTypeCount && memory_type_ == UINT32_MAX; ++i)
            if (req.memoryTypeBits & (1u << i)) memory_type_ = i;
    }
    VkMemoryAllocateFlagsInfo flags{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO};
    flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
    VkMemoryAllocateInfo alloc{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    alloc.pNext = &flags;
    alloc.allocationSize = req.size;
    alloc.memoryTypeIndex = memory_type_;
    VkDeviceMemory memory = VK_NULL_HANDLE;
    auto device_allocate = [&] {
        AddHostTime timed(counts_.device_allocation_ms);
        const VkResult result = a.vkAllocateMemory(device_, &alloc, nullptr, &memory);
        if (result == VK_SUCCESS) ++counts_.device_allocations;
        return result;
    };
    VkResult r = device_allocate();
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY) {
        release_free_chunks();
        r = device_allocate();
    }
    if (r != VK_SUCCESS) {
        a.vkDestroyBuffer(device_, buffer, nullptr);
        if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY) out_of_memory(size, "");
        check(r, "vkAllocateMemory of " + mib(size));
    }
    r = a.vkBindBufferMemory(device_, buffer, memory, 0);
    if (r != VK_SUCCESS) {
        a.vkDestroyBuffer(device_, buffer, nullptr);
        a.vkFreeMemory(device_, memory, nullptr);
        check(r, "vkBindBufferMemory");
    }
    VkBufferDeviceAddressInfo where{VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO};
    where.buffer = buffer;
    const uint64_t address = a.vkGetBufferDeviceAddress(device_, &where);
    chunks_[address] = Chunk{memory, buffer, size, slab};
    reserved_ += size;
    return address;
}

int VulkanMemory::new_pool() {
    free_.emplace_back();
    released_.push_back(false);
    return static_cast<int>(free_.size()) - 1;
}

void VulkanMemory::release_pool(int pool) noexcept {
    if (pool <= 0 || pool >= static_cast<int>(free_.size())) return;
    for (const auto& [bytes, address] : free_[pool]) {
        if (small_.is_live(address))
            small_.release(address);
        else
            free_[0].emplace(bytes, address);
    }
    free_[pool].clear();
    split_.move_pool(pool, 0);
    released_[pool] = true;
}

void* VulkanMemory::allocate(int64_t bytes) {
    count_allocation(name_, bytes);
    if (max_allocation_ > 0 && bytes > max_allocation_)
        out_of_memory(bytes, "; at most " + mib(max_allocation_) + " may be one allocation (" +
                                 (forced_allocation_ ? "KILN_VULKAN_MAX_ALLOCATION" : "maxMemoryAllocationSize") + ")");
    // Rounded up to a granule, but never past the limit (a request just under it still fits).
    const int64_t size = max_allocation_ > 0 ? std::min(rounded(bytes), max_allocation_) : rounded(bytes);
    const int64_t slab = slab_bytes();
    const bool small = size < kSmall && size <= slab;
    if (!small && cuts_blocks(split_policy_, limit_)) {
        if (const uint64_t cut = split_.take(current_, size)) return reinterpret_cast<void*>(cut);
        const uint64_t address = new_chunk(size, false);
        const int64_t chunk = chunks_.at(address).size;
        split_.add_segment(current_, address, chunk, chunk);
        return reinterpret_cast<void*>(address);
    }
    auto& pool = free_[current_];
    // A cached block at most a quarter (plus one granule) larger: reuse without wasting much. (Pool 0 holds no small
    // blocks: freed there, they merge back into their slab.)
    auto it = pool.lower_bound(size);
    if (it != pool.end() && it->first <= size + size / 4 + 2 * kMiB) {
        const uint64_t address = it->second;
        live_[address] = Block{it->first, current_};
        live_plain_bytes_ += it->first;
        pool.erase(it);
        return reinterpret_cast<void*>(address);
    }
    uint64_t address;
    int64_t block = size;
    if (small) {
        // Cut from a slab's free space (best fit), where freed blocks merge again, so that a slab whose blocks are
        // all free can go back to the driver (a component's weights moved off the device free whole slabs).
        address = small_.take(0, size);
        if (!address) {
            address = new_chunk(slab, true);
            small_.add_segment(0, address, slab, size);
        }
    } else {
        address = new_chunk(size, false);
        block = chunks_.at(address).size;
    }
    live_[address] = Block{block, current_};
    live_plain_bytes_ += block;
    return reinterpret_cast<void*>(address);
}

int64_t VulkanMemory::slab_bytes() const {
    // Under a cap a slab is at most a sixteenth of it (whole MiB, at least 4 MiB): a cap below 64 MiB could hold no
    // slab at all.
    int64_t slab = kSlab;
    if (limit_ > 0) slab = std::clamp(limit_ / 16 / kMiB * kMiB, kSmall, kSlab);
    return max_allocation_ > 0 ? std::min(slab, max_allocation_) : slab;
}

void VulkanMemory::deallocate(void* p) noexcept {
    const uint64_t address = reinterpret_cast<uint64_t>(p);
    if (split_.is_live(address)) {
        split_.release(address);
        return;
    }
    auto it = live_.find(address);
    if (it == live_.end()) return;
    const Block b = it->second;
    live_plain_bytes_ -= b.size;
    live_.erase(it);
    const int pool = released_[b.pool] ? 0 : b.pool;
    // A live recording's blocks stay its own (its command buffers name them); a small block of pool 0 merges back.
    if (pool == 0 && small_.is_live(address))
        small_.release(address);
    else
        free_[pool].emplace(b.size, address);
}

void VulkanMemory::make_room(int64_t missing) noexcept {
    std::vector<std::multimap<int64_t, uint64_t>::iterator> cached;  // dedicated chunks no block uses
    std::vector<int64_t> sizes;
    auto& pool = free_[0];  // a live recording's pool keeps its blocks
    for (auto it = pool.begin(); it != pool.end(); ++it) {
        auto c = chunks_.find(it->second);
        if (c != chunks_.end() && !c->second.slab && c->second.size == it->first) {
            cached.push_back(it);
            sizes.push_back(it->first);
        }
    }
    // Allocations whose cut blocks are all free again may go too, slabs among them.
    std::vector<SplitBlocks::Segment> segments = split_.free_segments([](int of) { return of == 0; });
    const size_t cut_segments = segments.size();
    for (const SplitBlocks::Segment& s : small_.free_segments([](int of) { return of == 0; })) segments.push_back(s);
    for (const SplitBlocks::Segment& s : segments) sizes.push_back(s.bytes);
    if (sizes.empty()) return;
    GiveBackCount count(counts_);
    if (!waited_idle()) return;  // work queued on a cached chunk may still run
    for (size_t k : blocks_to_give_back(sizes, missing)) {
        count.given();
        if (k < cached.size()) {
            free_chunk(cached[k]->second);
            pool.erase(cached[k]);
        } else {
            const size_t segment = k - cached.size();
            (segment < cut_segments ? split_ : small_).remove_segment(segments[segment].base);
            free_chunk(segments[segment].base);
        }
    }
}

void VulkanMemory::free_chunk(uint64_t address) noexcept {
    const Api& a = api();
    auto c = chunks_.find(address);
    a.vkDestroyBuffer(device_, c->second.buffer, nullptr);
    a.vkFreeMemory(device_, c->second.memory, nullptr);
    reserved_ -= c->second.size;
    chunks_.erase(c);
}

bool VulkanMemory::waited_idle() noexcept {
    // Waiting throws inside a recording (no submit there): then nothing is given back, and the request is
    // OutOfMemory, which the recorder answers by running the call eagerly. (It terminated the process before.)
    try {
        wait_idle_();
        return true;
    } catch (...) {
        return false;
    }
}

void VulkanMemory::release_free_chunks() noexcept {
    GiveBackCount count(counts_);
    if (!waited_idle()) return;
    auto& pool = free_[0];  // a live recording's pool keeps its blocks
    for (auto it = pool.begin(); it != pool.end();) {
        auto c = chunks_.find(it->second);
        if (c != chunks_.end() && !c->second.slab && c->second.size == it->first) {
            free_chunk(it->second);
            count.given();
            it = pool.erase(it);
        } else {
            ++it;
        }
    }
    for (SplitBlocks* blocks : {&split_, &small_})
        for (const SplitBlocks::Segment& s : blocks->free_segments([](int of) { return of == 0; })) {
            blocks->remove_segment(s.base);
            free_chunk(s.base);
            count.given();
        }
}

VulkanMemory::Location VulkanMemory::locate(const void* address) const {
    const uint64_t a = reinterpret_cast<uint64_t>(address);
    auto it = chunks_.upper_bound(a);
    require(it != chunks_.begin(), ErrorKind::InvalidArgument, name_ + ": an address that kiln did not allocate");
    --it;
    require(a < it->first + uint64_t(it->second.size), ErrorKind::InvalidArgument,
            name_ + ": an address that kiln did not allocate");
    return {it->second.buffer, a - it->first};
}

}  // namespace kiln::vulkan
