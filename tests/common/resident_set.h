// The process's resident set as Linux reports it (VmRSS), for tests of areas below src/runtime (whose
// process_rss_bytes says the same) that check which file pages a load leaves resident.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>

namespace kiln::test {

inline int64_t resident_bytes() {
    std::ifstream f("/proc/self/status");
    for (std::string line; std::getline(f, line);)
        if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
    return -1;
}

}  // namespace kiln::test
