// What a GPU backend's caching allocator asked of the driver (`--profile` prints it per device): allocations the
// driver served (cudaMalloc, vkAllocateMemory; the time of every attempt, refused ones too) and give-backs,
// where cached blocks went back to the driver to make room under a --vram cap, after the driver refused, or when
// a stage released the cache (each after a wait for the device; the time of waits that gave nothing back is
// not counted). In the steady state a run makes none of either; a run that does at every step is paying for it
// (docs/MEMORY.md: SD 1.5 q4_K txt2img under --vram 1G on an H200, hundreds of give-backs an image).
#pragma once
#include <chrono>
#include <cstdint>

namespace kiln {

struct AllocatorCounts {
    int64_t device_allocations = 0;
    double device_allocation_ms = 0;
    int64_t give_backs = 0;  // occasions
    int64_t blocks_given_back = 0;
    double give_back_ms = 0;

    bool empty() const { return device_allocations == 0 && give_backs == 0; }
    // What happened since `before`.
    AllocatorCounts since(const AllocatorCounts& before) const {
        return {device_allocations - before.device_allocations, device_allocation_ms - before.device_allocation_ms,
                give_backs - before.give_backs, blocks_given_back - before.blocks_given_back,
                give_back_ms - before.give_back_ms};
    }
};

// One occasion of giving cached blocks back: counted in `counts`, with its host time from construction on,
// where at least one block went (given()).
class GiveBackCount {
public:
    explicit GiveBackCount(AllocatorCounts& counts) : counts_(counts), start_(std::chrono::steady_clock::now()) {}
    ~GiveBackCount() {
        if (blocks_ == 0) return;
        ++counts_.give_backs;
        counts_.blocks_given_back += blocks_;
        counts_.give_back_ms +=
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
    }
    GiveBackCount(const GiveBackCount&) = delete;
    GiveBackCount& operator=(const GiveBackCount&) = delete;
    void given() { ++blocks_; }

private:
    AllocatorCounts& counts_;
    std::chrono::steady_clock::time_point start_;
    int64_t blocks_ = 0;
};

}  // namespace kiln
