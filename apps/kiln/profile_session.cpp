#include "profile_session.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/backend.h"
#include "core/memory.h"
#include "kiln/error.h"
#include "runtime/chrome_trace.h"
#include "runtime/profile_report.h"

namespace kiln::cli {

ProfileSession::ProfileSession(bool profile, std::string trace_path)
    : profile_(profile), trace_path_(std::move(trace_path)) {
    if (!profile_ && trace_path_.empty()) return;
    if (!trace_path_.empty()) {
        // Find out now rather than after a long run.
        created_trace_file_ = !std::filesystem::exists(trace_path_);
        std::ofstream probe(trace_path_, std::ios::binary | std::ios::app);
        require(probe.good(), ErrorKind::IO, "cannot write trace file " + trace_path_);
    }
    reset_memory_peaks();
    allocator_counts_ = backend_allocator_counts();
    profiler_ = std::make_unique<Profiler>();
    profiler_->start();
}

ProfileSession::~ProfileSession() {
    if (!profiler_) return;
    profiler_->stop();
    std::error_code ignored;
    if (created_trace_file_) std::filesystem::remove(trace_path_, ignored);
}

void ProfileSession::finish() {
    if (!profiler_) return;
    synchronize_backends();  // GPU backends report the GPU time they measured at a wait
    profiler_->stop();
    const ProfileSummary summary = profiler_->summary(!trace_path_.empty());
    if (profile_) {
        std::fprintf(stderr, "\n%s", format_profile_report(summary, memory_stats()).c_str());
        // Backends made during the run started at zero.
        for (const auto& [device, now] : backend_allocator_counts()) {
            AllocatorCounts before;
            for (const auto& [d, c] : allocator_counts_)
                if (d == device) before = c;
            std::fprintf(stderr, "%s", format_allocator_counts(device, now.since(before)).c_str());
        }
    }
    if (!trace_path_.empty()) {
        write_chrome_trace_file(summary, trace_path_);
        std::fprintf(stderr, "trace written to %s (open in ui.perfetto.dev or chrome://tracing)\n",
                     trace_path_.c_str());
    }
    profiler_.reset();
}

}  // namespace kiln::cli
