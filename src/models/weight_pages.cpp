#include "models/weight_pages.h"

#include <sys/mman.h>
#include <unistd.h>

namespace kiln {

void WeightPages::add(std::string name, const void* data, int64_t bytes) {
    if (data && bytes > 0) ranges_.push_back({std::move(name), data, bytes});
}

int64_t WeightPages::bytes() const { return bytes_with_prefix(""); }

int64_t WeightPages::bytes_with_prefix(const std::string& prefix) const {
    int64_t sum = 0;
    for (const Range& r : ranges_)
        if (r.name.compare(0, prefix.size(), prefix) == 0) sum += r.bytes;
    return sum;
}

void WeightPages::drop(const std::string& prefix) const noexcept {
    static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    for (const Range& r : ranges_) {
        if (r.name.compare(0, prefix.size(), prefix) != 0) continue;
        // Whole pages around the range: a neighbour sharing the first or last page faults it back in from the
        // page cache when it next reads it. (A read-only private mapping has no dirty pages to lose.)
        const uintptr_t begin = reinterpret_cast<uintptr_t>(r.data) / page * page;
        const uintptr_t end = reinterpret_cast<uintptr_t>(r.data) + static_cast<uintptr_t>(r.bytes);
        ::madvise(reinterpret_cast<void*>(begin), static_cast<size_t>(end - begin), MADV_DONTNEED);
    }
}

}  // namespace kiln
