#include "core/allocation_faults.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "kiln/error.h"

namespace kiln {

namespace {
int64_t g_fail_at = 0;  // 0: none
std::string g_device;
std::atomic<int64_t> g_count{0};
std::once_flag g_once;

void read_environment() {
    const char* env = std::getenv("KILN_FAIL_ALLOCATION_AT");
    const std::string text = env ? env : "";
    const size_t colon = text.rfind(':');
    const std::string count = colon == std::string::npos ? text : text.substr(colon + 1);
    char* end = nullptr;
    const long long n = count.empty() ? 0 : std::strtoll(count.c_str(), &end, 10);
    require(text.empty() || (!count.empty() && *end == '\0' && n >= 0), ErrorKind::InvalidArgument,
            "KILN_FAIL_ALLOCATION_AT=" + text + ": [DEVICE:]N expected, N a count of allocations");
    g_device = colon == std::string::npos ? "" : text.substr(0, colon);
    g_fail_at = n;
}
}  // namespace

void count_allocation(const std::string& where, int64_t bytes) {
    std::call_once(g_once, read_environment);
    if (g_fail_at == 0 || where.compare(0, g_device.size(), g_device) != 0) return;
    if (g_count.fetch_add(1, std::memory_order_relaxed) + 1 == g_fail_at)
        fail(ErrorKind::OutOfMemory, where + ": out of memory: allocation " + std::to_string(g_fail_at) + " (" +
                                         std::to_string(bytes) + " bytes) failed as KILN_FAIL_ALLOCATION_AT asked");
}

void fail_allocation_at(const std::string& device, int64_t n) {
    std::call_once(g_once, read_environment);  // so that the environment is not read over these settings later
    g_device = device;
    g_fail_at = n;
    g_count = 0;
}

int64_t allocations_counted() { return g_count.load(std::memory_order_relaxed); }

}  // namespace kiln
