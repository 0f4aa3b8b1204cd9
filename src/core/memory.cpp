#include "core/memory.h"

#include <algorithm>
#include <atomic>
#include <mutex>

#include "kiln/error.h"

namespace kiln {

namespace {

constexpr int kTotal = kMemoryCategoryCount;  // the slot after the categories holds the device total

struct DeviceCounters {
    std::atomic<int64_t> current[kMemoryCategoryCount + 1] = {};
    std::atomic<int64_t> peak[kMemoryCategoryCount + 1] = {};
    std::atomic<int64_t> window = 0;
};

// Constant-initialised, so tensors made during static initialisation of other files count safely.
DeviceCounters g_counters[kMaxMemoryDevices];
std::mutex g_names_mutex;
std::string g_names[kMaxMemoryDevices];
std::atomic<int> g_device_count{0};

thread_local MemoryCategory t_category = MemoryCategory::Activations;

void raise_to(std::atomic<int64_t>& peak, int64_t value) {
    int64_t seen = peak.load(std::memory_order_relaxed);
    while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {}
}

DeviceCounters& counters(MemoryDevice device) {
    // Ids come from memory_device(); anything else is a programming error, not user input.
    return g_counters[device >= 0 && device < kMaxMemoryDevices ? device : kCpuDevice];
}

}  // namespace

const char* memory_category_name(MemoryCategory category) {
    switch (category) {
        case MemoryCategory::Weights: return "weights";
        case MemoryCategory::Activations: return "activations";
        case MemoryCategory::Workspace: return "workspace";
        case MemoryCategory::Staging: return "staging";
        case MemoryCategory::HostPinned: return "host_pinned";
        case MemoryCategory::MappedFile: return "mapped_file";
    }
    return "unknown";
}

MemoryDevice memory_device(const std::string& name) {
    std::lock_guard<std::mutex> lock(g_names_mutex);
    if (g_device_count.load() == 0) {
        g_names[kCpuDevice] = "cpu";
        g_device_count.store(1);
    }
    const int n = g_device_count.load();
    for (int i = 0; i < n; ++i)
        if (g_names[i] == name) return i;
    require(n < kMaxMemoryDevices, ErrorKind::InvalidArgument,
            "memory accounting: cannot register device '" + name + "', already " + std::to_string(n) + " devices");
    g_names[n] = name;
    g_device_count.store(n + 1);
    return n;
}

void record_allocation(MemoryDevice device, MemoryCategory category, int64_t bytes) {
    if (bytes <= 0) return;
    DeviceCounters& c = counters(device);
    const int k = static_cast<int>(category);
    raise_to(c.peak[k], c.current[k].fetch_add(bytes, std::memory_order_relaxed) + bytes);
    const int64_t total = c.current[kTotal].fetch_add(bytes, std::memory_order_relaxed) + bytes;
    raise_to(c.peak[kTotal], total);
    raise_to(c.window, total);
}

void record_release(MemoryDevice device, MemoryCategory category, int64_t bytes) {
    if (bytes <= 0) return;
    DeviceCounters& c = counters(device);
    c.current[static_cast<int>(category)].fetch_sub(bytes, std::memory_order_relaxed);
    c.current[kTotal].fetch_sub(bytes, std::memory_order_relaxed);
}

DeviceMemoryStats MemoryStats::device(const std::string& name) const {
    for (const DeviceMemoryStats& d : devices)
        if (d.device == name) return d;
    DeviceMemoryStats empty;
    empty.device = name;
    return empty;
}

MemoryStats memory_stats() {
    memory_device("cpu");  // makes sure cpu is listed even before anything registered it
    MemoryStats s;
    std::lock_guard<std::mutex> lock(g_names_mutex);
    for (int d = 0; d < g_device_count.load(); ++d) {
        DeviceMemoryStats dev;
        dev.device = g_names[d];
        for (int k = 0; k <= kTotal; ++k) {
            MemoryCounter m{g_counters[d].current[k].load(), g_counters[d].peak[k].load()};
            m.peak = std::max(m.peak, m.current);  // a reader between the two updates never sees peak < current
            (k == kTotal ? dev.total : dev.categories[k]) = m;
        }
        s.devices.push_back(std::move(dev));
    }
    return s;
}

void reset_memory_peaks() {
    for (DeviceCounters& c : g_counters)
        for (int k = 0; k <= kTotal; ++k) c.peak[k].store(c.current[k].load());
}

void reset_memory_window(MemoryDevice device) {
    DeviceCounters& c = counters(device);
    c.window.store(c.current[kTotal].load());
}

int64_t memory_window_peak(MemoryDevice device) {
    DeviceCounters& c = counters(device);
    return std::max(c.window.load(), c.current[kTotal].load());
}

MemoryCategory current_memory_category() { return t_category; }

MemoryCategoryScope::MemoryCategoryScope(MemoryCategory category) : saved_(t_category) { t_category = category; }
MemoryCategoryScope::~MemoryCategoryScope() { t_category = saved_; }

MemoryLease::MemoryLease(int64_t bytes, MemoryCategory category, MemoryDevice device)
    : bytes_(bytes > 0 ? bytes : 0), category_(category), device_(device) {
    record_allocation(device_, category_, bytes_);
}

MemoryLease::MemoryLease(MemoryLease&& other) noexcept
    : bytes_(other.bytes_), category_(other.category_), device_(other.device_) {
    other.bytes_ = 0;
}

MemoryLease& MemoryLease::operator=(const MemoryLease& other) {
    if (this != &other) {
        release();
        bytes_ = other.bytes_;
        category_ = current_memory_category();
        device_ = other.device_;
        record_allocation(device_, category_, bytes_);
    }
    return *this;
}

MemoryLease& MemoryLease::operator=(MemoryLease&& other) noexcept {
    if (this != &other) {
        release();
        bytes_ = other.bytes_;
        category_ = other.category_;
        device_ = other.device_;
        other.bytes_ = 0;
    }
    return *this;
}

void MemoryLease::release() noexcept {
    record_release(device_, category_, bytes_);
    bytes_ = 0;
}

}  // namespace kiln
