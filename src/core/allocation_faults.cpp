#include "core/allocation_faults.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "kiln/error.h"

namespace kiln {

namespace {

// -1: the environment not read yet; 0: no failure; N: the Nth counted allocation fails.
std::atomic<int64_t> g_fail_at{-1};
std::atomic<int64_t> g_count{0};
std::string g_device;  // the prefix a counted allocation's device has; written before g_fail_at is published
std::once_flag g_env_once;

void read_environment() {
    const char* env = std::getenv("KILN_FAIL_ALLOCATION_AT");
    const std::string text = env ? env : "";
    const size_t colon = text.rfind(':');
    const std::string count = colon == std::string::npos ? text : text.substr(colon + 1);
    char* end = nullptr;
    const long long n = count.empty() ? 0 : std::strtoll(count.c_str(), &end, 10);
    require(text.empty() || (!count.empty() && *end == '\0' && n >= 0), ErrorKind::InvalidArgument,
            "KILN_FAIL_ALLOCATION_AT=" + text + ": [DEVICE:]N expected, N a count of allocations (1, 2, ...)");
    g_device = colon == std::string::npos ? "" : text.substr(0, colon);
    g_fail_at.store(n, std::memory_order_release);
}

}  // namespace

void count_allocation(const std::string& where, int64_t bytes) {
    if (g_fail_at.load(std::memory_order_acquire) < 0) std::call_once(g_env_once, read_environment);
    const int64_t n = g_fail_at.load(std::memory_order_acquire);
    if (n == 0 || where.compare(0, g_device.size(), g_device) != 0) return;
    if (g_count.fetch_add(1, std::memory_order_relaxed) + 1 == n)
        fail(ErrorKind::OutOfMemory, where + ": out of memory: allocation " + std::to_string(n) + " (" +
                                         std::to_string(bytes) + " bytes) failed as KILN_FAIL_ALLOCATION_AT asked");
}

void fail_allocation_at(int64_t n, const std::string& device) {
    std::call_once(g_env_once, [] {});  // the environment is not read after this
    g_fail_at.store(0, std::memory_order_release);
    g_device = device;
    g_count.store(0, std::memory_order_relaxed);
    g_fail_at.store(n, std::memory_order_release);
}

}  // namespace kiln
