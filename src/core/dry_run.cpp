#include "core/dry_run.h"

#include <algorithm>

#include "core/backend.h"
#include "kiln/error.h"

namespace kiln {

namespace {

// Above every address a 64-bit process or a device's virtual memory hands out (48 or 57 bits), below the top so
// that an offset never wraps.
constexpr uintptr_t kDryBase = uintptr_t(0xD) << 60, kDryEnd = uintptr_t(0xE) << 60;
constexpr uintptr_t kAlign = 256;

}  // namespace

void* DryRunMemory::allocate(int64_t bytes) {
    require(bytes >= 0, ErrorKind::InvalidArgument, "dry run: a negative allocation");
    const uintptr_t size = (uintptr_t(std::max<int64_t>(bytes, 1)) + kAlign - 1) / kAlign * kAlign;
    require(next_ + size < kDryEnd - kDryBase, ErrorKind::OutOfMemory, "dry run: address range used up");
    const uintptr_t at = kDryBase + next_;
    next_ += size;
    sizes_[at] = bytes;
    live_ += bytes;
    peak_ = std::max(peak_, live_);
    return reinterpret_cast<void*>(at);
}

bool DryRunMemory::owns(const void* p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    return a >= kDryBase && a < kDryEnd;
}

void DryRunMemory::deallocate(void* p) noexcept {
    auto it = sizes_.find(reinterpret_cast<uintptr_t>(p));
    if (it == sizes_.end()) return;  // made before a reset()
    live_ -= it->second;
    sizes_.erase(it);
}

void DryRunMemory::reset() {
    sizes_.clear();
    live_ = peak_ = 0;
}

DryRun::DryRun(Backend& backend) : backend_(backend), running_(backend.start_dry_run()) {}

DryRun::~DryRun() {
    if (running_) backend_.finish_dry_run();
}

int64_t DryRun::peak_bytes() const { return backend_.dry_run_peak_bytes(); }

}  // namespace kiln
