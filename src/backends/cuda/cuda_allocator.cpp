#include "backends/cuda/cuda_allocator.h"

#include <string>
#include <utility>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/gpu_runtime.h"
#include "core/cache_give_back.h"
#include "core/allocation_faults.h"

namespace kiln::cuda {

namespace {
constexpr int64_t kMiB = int64_t(1) << 20;
std::string mib(int64_t bytes) { return std::to_string((bytes + kMiB / 2) / kMiB) + " MiB"; }
}  // namespace

int64_t CudaAllocator::rounded(int64_t bytes) {
    const int64_t granule = bytes < kMiB ? 512 : 2 * kMiB;
    return (bytes + granule - 1) / granule * granule;
}

CudaAllocator::~CudaAllocator() {
    for (auto& pool : free_)
        for (auto& [size, p] : pool) cudaFree(p);
    for (auto& [p, b] : live_) cudaFree(p);  // tensors that outlive the backend: the process is ending
    for (const SplitBlocks::Segment& s : split_.segments()) cudaFree(reinterpret_cast<void*>(s.base));
}

int CudaAllocator::new_pool() {
    free_.emplace_back();
    released_.push_back(false);
    return static_cast<int>(free_.size()) - 1;
}

void* CudaAllocator::allocate(int64_t bytes) {
    count_allocation(name_, bytes);  // KILN_FAIL_ALLOCATION_AT (core/allocation_faults.h)
    const int64_t size = rounded(bytes);
    if (size >= kMiB && cuts_blocks(split_policy_, limit_)) return allocate_split(bytes, size);
    auto& pool = free_[current_];
    // A cached block at most a quarter (plus one granule) larger: reuse without wasting much.
    auto it = pool.lower_bound(size);
    if (it != pool.end() && it->first <= size + size / 4 + 2 * kMiB) {
        void* p = it->second;
        live_[p] = Block{it->first, current_};
        live_bytes_ += it->first;
        pool.erase(it);
        return p;
    }
    // Under a cap set after blocks were cut (WhileUncapped, a run that ran out and goes on under --vram auto): the
    // free room of their segments serves before the driver is asked, as make_room could not give it back.
    if (size >= kMiB)
        if (const uint64_t cut = split_.take(current_, size)) return reinterpret_cast<void*>(cut);
    fit_limit(bytes, size);
    void* p = from_driver(bytes, size);
    live_[p] = Block{size, current_};
    live_bytes_ += size;
    return p;
}

void* CudaAllocator::allocate_split(int64_t bytes, int64_t size) {
    if (const uint64_t cut = split_.take(current_, size)) return reinterpret_cast<void*>(cut);
    // A whole block cached while requests were served whole (a cap since lifted) becomes a segment to cut from,
    // rather than staying cached beside a new allocation.
    auto& pool = free_[current_];
    if (auto it = pool.lower_bound(size); it != pool.end()) {
        void* p = it->second;
        const int64_t block = it->first;
        split_.add_segment(current_, reinterpret_cast<uint64_t>(p), block, size);
        pool.erase(it);  // after: were add_segment to throw, the block would stay cached, not lost
        return p;
    }
    fit_limit(bytes, size);
    void* p = from_driver(bytes, size);
    split_.add_segment(current_, reinterpret_cast<uint64_t>(p), size, size);
    return p;
}

void CudaAllocator::fit_limit(int64_t bytes, int64_t size) {
    if (limit_ <= 0 || reserved_ + size <= limit_) return;
    make_room(size);
    if (reserved_ + size > limit_)
        throw Error(ErrorKind::OutOfMemory, "cuda:" + std::to_string(device_) + ": the memory limit of " + mib(limit_) +
                                                " (--vram) is reached: asked for " + mib(bytes) + ", kiln holds " +
                                                mib(reserved_) + " (" + mib(live_bytes()) + " of it in use)");
}

void* CudaAllocator::from_driver(int64_t bytes, int64_t size) {
    void* p = nullptr;
    auto device_malloc = [&] {
        AddHostTime timed(counts_.device_allocation_ms);
        const cudaError_t e = cudaMalloc(&p, static_cast<size_t>(size));
        if (e == cudaSuccess) ++counts_.device_allocations;
        return e;
    };
    cudaError_t err = device_malloc();
    if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        release_cached();
        err = device_malloc();
    }
    if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        throw Error(ErrorKind::OutOfMemory, "cuda:" + std::to_string(device_) + ": out of memory: asked for " +
                                                mib(bytes) + ", " + mib(int64_t(free_b)) + " free of " +
                                                mib(int64_t(total_b)) + " (kiln holds " + mib(reserved_) + ")");
    }
    KILN_CUDA_CHECK(err);
    reserved_ += size;
    return p;
}

void CudaAllocator::deallocate(void* p) noexcept {
    if (split_.is_live(reinterpret_cast<uint64_t>(p))) {
        split_.release(reinterpret_cast<uint64_t>(p));  // a released pool's segments are pool 0's (release_pool)
        return;
    }
    auto it = live_.find(p);
    if (it == live_.end()) return;
    const Block b = it->second;
    live_.erase(it);
    live_bytes_ -= b.size;
    if (released_[b.pool]) {
        // Stream order: work queued on the block may still run, so wait before handing it to the driver.
        cudaDeviceSynchronize();
        cudaFree(p);
        reserved_ -= b.size;
        return;
    }
    free_[b.pool].emplace(b.size, p);
}

void CudaAllocator::release_pool(int pool) noexcept {
    if (pool <= 0 || pool >= static_cast<int>(free_.size())) return;
    cudaDeviceSynchronize();
    for (auto& [size, p] : free_[pool]) {
        cudaFree(p);
        reserved_ -= size;
    }
    free_[pool].clear();
    for (const SplitBlocks::Segment& s : split_.free_segments([pool](int of) { return of == pool; })) {
        cudaFree(reinterpret_cast<void*>(s.base));
        reserved_ -= split_.remove_segment(s.base);
    }
    // Segments still partly live: their free parts serve ordinary work from now on (the graph that named them is
    // gone and the device has finished), and the live parts join them when freed.
    split_.move_pool(pool, 0);
    released_[pool] = true;
}

void CudaAllocator::make_room(int64_t size) noexcept {
    // What may go back: cached whole blocks, and segments whose cut blocks are all free again.
    std::vector<std::pair<int, std::multimap<int64_t, void*>::iterator>> cached;
    std::vector<int64_t> sizes;
    for (size_t i = 0; i < free_.size(); ++i) {
        if (!givable(int(i))) continue;  // a live recording's pool keeps its blocks
        for (auto it = free_[i].begin(); it != free_[i].end(); ++it) {
            cached.emplace_back(int(i), it);
            sizes.push_back(it->first);
        }
    }
    const std::vector<SplitBlocks::Segment> segments = split_.free_segments([this](int pool) { return givable(pool); });
    for (const SplitBlocks::Segment& s : segments) sizes.push_back(s.bytes);
    if (sizes.empty()) return;
    GiveBackCount count(counts_);
    // Stream order: work queued on a cached block may still run. A wait that fails (inside a graph capture, say)
    // gives nothing back: the request is then OutOfMemory, which a recording answers by running eagerly.
    if (cudaDeviceSynchronize() != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    for (size_t k : blocks_to_give_back(sizes, reserved_ + size - limit_)) {
        void* p = k < cached.size() ? cached[k].second->second : reinterpret_cast<void*>(segments[k - cached.size()].base);
        if (cudaFree(p) != cudaSuccess) {
            cudaGetLastError();
            return;
        }
        count.given();
        if (k < cached.size()) {
            reserved_ -= cached[k].second->first;
            free_[size_t(cached[k].first)].erase(cached[k].second);
        } else {
            reserved_ -= split_.remove_segment(segments[k - cached.size()].base);
        }
    }
}

void CudaAllocator::release_cached() noexcept {
    GiveBackCount count(counts_);
    cudaDeviceSynchronize();
    for (size_t i = 0; i < free_.size(); ++i) {
        if (!givable(int(i))) continue;  // a live recording's pool keeps its blocks
        for (auto& [size, p] : free_[i]) {
            cudaFree(p);
            reserved_ -= size;
            count.given();
        }
        free_[i].clear();
    }
    for (const SplitBlocks::Segment& s : split_.free_segments([this](int pool) { return givable(pool); })) {
        cudaFree(reinterpret_cast<void*>(s.base));
        reserved_ -= split_.remove_segment(s.base);
        count.given();
    }
}

}  // namespace kiln::cuda
