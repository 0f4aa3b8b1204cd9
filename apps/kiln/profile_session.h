// --profile and --trace FILE for a command: a profiler running from construction to finish(), then
// the report on stderr and the Chrome trace in FILE.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/allocator_counts.h"
#include "runtime/profiler.h"

namespace kiln::cli {

class ProfileSession {
public:
    // Checks that the trace file can be written before any work starts (IO error naming it).
    ProfileSession(bool profile, std::string trace_path);
    ~ProfileSession();  // stops a profiler that finish() did not (an error on the way)
    ProfileSession(const ProfileSession&) = delete;
    ProfileSession& operator=(const ProfileSession&) = delete;

    bool enabled() const { return profiler_ != nullptr; }
    // Stops the profiler, prints the report (--profile) and writes the trace (--trace).
    void finish();

private:
    bool profile_;
    std::string trace_path_;
    bool created_trace_file_ = false;  // made empty by the check; removed again if the run fails
    std::unique_ptr<Profiler> profiler_;
    std::vector<std::pair<std::string, AllocatorCounts>> allocator_counts_;  // the backends' at the start
};

}  // namespace kiln::cli
