// What a GPU backend's caching allocator asked of the driver (`--profile` prints it per device): allocations the
// driver served (cudaMalloc, vkAllocateMemory) and give-backs, where cached blocks went back to the driver to make
// room under a --vram cap or after the driver refused (each waits for the device first), with the host time
// they took. In the steady state a run makes none of either; a run that does at every step is paying for it
// (docs/MEMORY.md: SD 1.5 q4_K txt2img under --vram 1G on an H200, ~230 give-backs an image).
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

// Adds the host milliseconds of its lifetime to `ms`.
class AddHostTime {
public:
    explicit AddHostTime(double& ms) : ms_(ms), start_(std::chrono::steady_clock::now()) {}
    ~AddHostTime() { ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count(); }
    AddHostTime(const AddHostTime&) = delete;
    AddHostTime& operator=(const AddHostTime&) = delete;

private:
    double& ms_;
    std::chrono::steady_clock::time_point start_;
};

}  // namespace kiln
