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
}

int CudaAllocator::new_pool() {
    free_.emplace_back();
    released_.push_back(false);
    return static_cast<int>(free_.size()) - 1;
}

void* CudaAllocator::allocate(int64_t bytes) {
    count_allocation(name_, bytes);  // KILN_FAIL_ALLOCATION_AT (core/allocation_faults.h)
    const int64_t size = rounded(bytes);
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
    if (limit_ > 0 && reserved_ + size > limit_) {
        make_room(size);
        if (reserved_ + size > limit_)
            throw Error(ErrorKind::OutOfMemory, "cuda:" + std::to_string(device_) + ": the memory limit of " +
                                                    mib(limit_) + " (--vram) is reached: asked for " + mib(bytes) +
                                                    ", kiln holds " + mib(reserved_));
    }
    void* p = nullptr;
    auto device_malloc = [&] {
        AddHostTime timed(counts_.device_allocation_ms);
        ++counts_.device_allocations;
        return cudaMalloc(&p, static_cast<size_t>(size));
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
    live_[p] = Block{size, current_};
    live_bytes_ += size;
    return p;
}

void CudaAllocator::deallocate(void* p) noexcept {
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
    released_[pool] = true;
}

void CudaAllocator::make_room(int64_t size) noexcept {
    std::vector<std::pair<int, std::multimap<int64_t, void*>::iterator>> cached;
    std::vector<int64_t> sizes;
    for (size_t i = 0; i < free_.size(); ++i) {
        if (i != 0 && !released_[i]) continue;  // a live recording's pool keeps its blocks
        for (auto it = free_[i].begin(); it != free_[i].end(); ++it) {
            cached.emplace_back(int(i), it);
            sizes.push_back(it->first);
        }
    }
    if (cached.empty()) return;
    AddHostTime timed(counts_.give_back_ms);
    ++counts_.give_backs;
    // Stream order: work queued on a cached block may still run. A wait that fails (inside a graph capture, say)
    // gives nothing back: the request is then OutOfMemory, which a recording answers by running eagerly.
    if (cudaDeviceSynchronize() != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    for (size_t k : blocks_to_give_back(sizes, reserved_ + size - limit_)) {
        const auto& [pool, it] = cached[k];
        if (cudaFree(it->second) != cudaSuccess) {
            cudaGetLastError();
            return;
        }
        reserved_ -= it->first;
        ++counts_.blocks_given_back;
        free_[pool].erase(it);
    }
}

void CudaAllocator::release_cached() noexcept {
    AddHostTime timed(counts_.give_back_ms);
    cudaDeviceSynchronize();
    const int64_t before = counts_.blocks_given_back;
    for (size_t i = 0; i < free_.size(); ++i) {
        if (i != 0 && !released_[i]) continue;  // a live recording's pool keeps its blocks
        for (auto& [size, p] : free_[i]) {
            cudaFree(p);
            reserved_ -= size;
            ++counts_.blocks_given_back;
        }
        free_[i].clear();
    }
    if (counts_.blocks_given_back > before) ++counts_.give_backs;
}

}  // namespace kiln::cuda
