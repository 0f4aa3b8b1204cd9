#include "runtime/process_usage.h"

#include <sys/resource.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

namespace kiln {

namespace {

// A "Key:   123 kB" line of /proc/self/status, in bytes; -1 when absent.
int64_t status_kib_field(const char* key) {
    std::ifstream f("/proc/self/status");
    std::string line;
    const size_t n = std::strlen(key);
    while (std::getline(f, line))
        if (line.compare(0, n, key) == 0 && line.size() > n && line[n] == ':') {
            long long kib = 0;
            if (std::sscanf(line.c_str() + n + 1, "%lld", &kib) == 1) return static_cast<int64_t>(kib) * 1024;
        }
    return -1;
}

}  // namespace

int64_t process_rss_bytes() {
    const int64_t v = status_kib_field("VmRSS");
    return v > 0 ? v : 0;
}

int64_t process_peak_rss_bytes() {
    const int64_t v = status_kib_field("VmHWM");
    if (v > 0) return v;
    rusage ru{};
    if (getrusage(RUSAGE_SELF, &ru) == 0) return static_cast<int64_t>(ru.ru_maxrss) * 1024;  // Linux: KiB
    return 0;
}

bool reset_process_peak_rss() {
    std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
    if (!f) return false;
    const bool ok = std::fputs("5", f) >= 0;  // "5": reset the peak resident set size
    return std::fclose(f) == 0 && ok;
}

int64_t release_free_heap_memory() {
#ifdef __GLIBC__
    const int64_t before = process_rss_bytes();
    malloc_trim(0);
    const int64_t after = process_rss_bytes();
    return before > after ? before - after : 0;
#else
    return 0;
#endif
}

double process_cpu_seconds() {
    rusage ru{};
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
    return sec(ru.ru_utime) + sec(ru.ru_stime);
}

}  // namespace kiln
