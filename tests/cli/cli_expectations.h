// What every failed `kiln` run must look like to a user: it ended by itself (no signal: no crash,
// no sanitizer abort), with a non-zero status, and wrote exactly one line to stderr,
// "kiln: error: ...", naming the problem.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/run_process.h"

namespace kiln::test {

inline std::string lowercase(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
}

// `names`: what the line must contain verbatim (a path, a tensor name, an option); `words`: what it
// must contain ignoring case (the kind of problem, e.g. "overlap").
inline void expect_one_error_line(const ProcessResult& r, const std::vector<std::string>& names,
                                  const std::vector<std::string>& words = {}) {
    ASSERT_TRUE(r.exited) << "kiln did not exit normally: " << r.describe();
    EXPECT_NE(r.exit_code, 0) << r.describe();
    const std::vector<std::string> lines = r.err_lines();
    ASSERT_EQ(lines.size(), 1u) << "stderr must be exactly one line: " << r.describe();
    const std::string& line = lines[0];
    std::printf("[ stderr ] %s\n", line.c_str());  // so that the log shows what users read
    EXPECT_EQ(line.rfind("kiln: error: ", 0), 0u) << line;
    for (const std::string& n : names) EXPECT_NE(line.find(n), std::string::npos) << "'" << n << "' not in: " << line;
    for (const std::string& w : words)
        EXPECT_NE(lowercase(line).find(lowercase(w)), std::string::npos) << "'" << w << "' not in: " << line;
}

inline void expect_success(const ProcessResult& r) {
    ASSERT_TRUE(r.exited) << r.describe();
    ASSERT_EQ(r.exit_code, 0) << r.describe();
}

// Whether the kiln program lists a Vulkan device (lavapipe in CI); where none is and KILN_EXPECT_VULKAN=1 asks
// for one, a failure.
inline bool vulkan_or_skip() {
    const ProcessResult r = run_kiln({"info", "--devices"});
    if (r.out.find("vulkan:0") != std::string::npos) return true;
    const char* e = std::getenv("KILN_EXPECT_VULKAN");
    if (e && std::string(e) == "1") ADD_FAILURE() << "KILN_EXPECT_VULKAN=1 but kiln lists no Vulkan device";
    return false;
}

}  // namespace kiln::test
