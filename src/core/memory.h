// Memory accounting: every buffer kiln owns is counted, by device and by category, with its current
// size and the peak since the last reset. Tensor storage counts itself (see tensor.h); other owners
// (views of mapped files, backends' device buffers, staging areas) record through a MemoryLease.
//
// It sits in core, below Tensor, so that every layer can attribute what it allocates. A backend
// registers its devices by name ("cuda:0") and records its own allocations there; "cpu" is device 0.
// Counters are atomics, so buffers may be made and freed on any thread.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

enum class MemoryCategory {
    Weights,      // model parameters
    Activations,  // tensors made while running (the default)
    Workspace,    // ops' scratch (im2col columns, attention blocks)
    Staging,      // transfer buffers between host and device
    HostPinned,   // page-locked host memory for device transfers
    MappedFile,   // weights read in place from a mapped file (Tensor::view), backed by the page cache
};
constexpr int kMemoryCategoryCount = 6;
const char* memory_category_name(MemoryCategory category);  // "weights", "activations", ...

using MemoryDevice = int;
constexpr MemoryDevice kCpuDevice = 0;
constexpr int kMaxMemoryDevices = 8;
// The device's id, registering the name on first use ("cpu" is kCpuDevice). Throws InvalidArgument
// when more than kMaxMemoryDevices names are registered.
MemoryDevice memory_device(const std::string& name);

struct MemoryCounter {
    int64_t current = 0;  // bytes held now
    int64_t peak = 0;     // most bytes held at once since the last reset_memory_peaks()
};

struct DeviceMemoryStats {
    std::string device;
    std::array<MemoryCounter, kMemoryCategoryCount> categories{};
    MemoryCounter total;  // all categories together (its peak is the peak of the sum, not the sum of peaks)
    const MemoryCounter& operator[](MemoryCategory c) const { return categories[static_cast<int>(c)]; }
};

struct MemoryStats {
    std::vector<DeviceMemoryStats> devices;  // every registered device, cpu first
    // The named device's figures; all zero (and named) if it was never registered.
    DeviceMemoryStats device(const std::string& name) const;
};

MemoryStats memory_stats();
// Sets every peak to the current figure, so that later peaks describe what happens from now on.
void reset_memory_peaks();

// A second high-water mark of a device's total that only profilers reset: the peak of a stage
// without disturbing the peaks memory_stats() reports. One profiler at a time uses it.
void reset_memory_window(MemoryDevice device = kCpuDevice);
int64_t memory_window_peak(MemoryDevice device = kCpuDevice);

// Raw recording, for owners that cannot hold a MemoryLease. Every record_allocation must be matched by a
// record_release of the same device, category and bytes.
void record_allocation(MemoryDevice device, MemoryCategory category, int64_t bytes);
void record_release(MemoryDevice device, MemoryCategory category, int64_t bytes);

// The category new tensors on this thread are counted in (Activations unless a scope says otherwise).
MemoryCategory current_memory_category();

// While alive, tensors created on this thread are counted in `category` (model loaders use Weights).
class MemoryCategoryScope {
public:
    explicit MemoryCategoryScope(MemoryCategory category);
    ~MemoryCategoryScope();
    MemoryCategoryScope(const MemoryCategoryScope&) = delete;
    MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;

private:
    MemoryCategory saved_;
};

// Counts `bytes` for as long as it lives. A copy is a new buffer counted in the copying thread's
// current category; a move hands the count over.
class MemoryLease {
public:
    MemoryLease() = default;
    MemoryLease(int64_t bytes, MemoryCategory category, MemoryDevice device = kCpuDevice);
    explicit MemoryLease(int64_t bytes) : MemoryLease(bytes, current_memory_category()) {}
    MemoryLease(const MemoryLease& other) : MemoryLease(other.bytes_, current_memory_category(), other.device_) {}
    MemoryLease(MemoryLease&& other) noexcept;
    MemoryLease& operator=(const MemoryLease& other);
    MemoryLease& operator=(MemoryLease&& other) noexcept;
    ~MemoryLease() { release(); }

    int64_t bytes() const { return bytes_; }
    MemoryCategory category() const { return category_; }
    MemoryDevice device() const { return device_; }
    void release() noexcept;  // stops counting (bytes() becomes 0)

private:
    int64_t bytes_ = 0;
    MemoryCategory category_ = MemoryCategory::Activations;
    MemoryDevice device_ = kCpuDevice;
};

}  // namespace kiln
