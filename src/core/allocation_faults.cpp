#include "core/allocation_faults.h"

#include <atomic>
#include <cstdlib>

#include "kiln/error.h"

namespace kiln {

namespace {

// -1: the environment not read yet; 0: no failure; N: the Nth allocation fails.
std::atomic<int64_t> g_fail_at{-1};
std::atomic<int64_t> g_count{0};

int64_t fail_at() {
    int64_t n = g_fail_at.load(std::memory_order_relaxed);
    if (n >= 0) return n;
    const char* env = std::getenv("KILN_FAIL_ALLOCATION_AT");
    char* end = nullptr;
    const long long v = env && *env ? std::strtoll(env, &end, 10) : 0;
    require(!env || !*env || (*end == '\0' && v >= 0), ErrorKind::InvalidArgument,
            std::string("KILN_FAIL_ALLOCATION_AT=") + (env ? env : "") + ": a count of allocations (1, 2, ...) expected");
    g_fail_at.store(v, std::memory_order_relaxed);
    return v;
}

}  // namespace

void count_allocation(const std::string& where, int64_t bytes) {
    const int64_t n = fail_at();
    if (n == 0) return;
    if (g_count.fetch_add(1, std::memory_order_relaxed) + 1 == n)
        fail(ErrorKind::OutOfMemory, where + ": out of memory: allocation " + std::to_string(n) + " (" +
                                         std::to_string(bytes) + " bytes) failed as KILN_FAIL_ALLOCATION_AT asked");
}

void fail_allocation_at(int64_t n) {
    g_count.store(0, std::memory_order_relaxed);
    g_fail_at.store(n, std::memory_order_relaxed);
}

}  // namespace kiln
