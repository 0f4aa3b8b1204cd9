// A shape-only pass through a GPU backend's own ops (a "dry run"): while one is on, the backend counts the
// allocations its ops ask for instead of making them, and runs no kernel, copy or timing. The memory plans
// (pipeline/gpu_memory_plan.h) run a UNet call, the text encoders and the VAE decode this way before anything is
// allocated (pipeline/dry_run_plan.h): their peaks, the backend's scratch included, are then derived from the ops
// rather than fitted (docs/MEMORY.md).
//
// A dry run's tensors have addresses no real buffer has; reading their values gives zeros. Weights stay where
// they are, on the device or offloaded: their addresses are never taken. One thread runs a backend's dry pass,
// with nothing else using that backend meanwhile.
#pragma once
#include <cstdint>
#include <unordered_map>

namespace kiln {

class Backend;

// The counting allocator a backend uses while dry: unique, aligned addresses in a range of their own.
class DryRunMemory {
public:
    void* allocate(int64_t bytes);
    // Whether p came from a dry run's allocate (any dry run's: a tensor may outlive the pass that made it).
    static bool owns(const void* p);
    void deallocate(void* p) noexcept;
    void reset();  // counts from zero (addresses keep growing)
    int64_t live_bytes() const { return live_; }
    int64_t peak_bytes() const { return peak_; }

private:
    std::unordered_map<uintptr_t, int64_t> sizes_;
    uintptr_t next_ = 0;
    int64_t live_ = 0, peak_ = 0;
};

// While alive, `backend` runs dry (Backend::start_dry_run) where it can: running() says whether it does.
class DryRun {
public:
    explicit DryRun(Backend& backend);
    ~DryRun();
    DryRun(const DryRun&) = delete;
    DryRun& operator=(const DryRun&) = delete;
    bool running() const { return running_; }
    // The most bytes the pass's allocations held at once so far.
    int64_t peak_bytes() const;

private:
    Backend& backend_;
    bool running_;
};

}  // namespace kiln
