// The --profile report: per stage (calls, time, share, op time, peak memory), per op kind (calls,
// time, share, FLOPs and the rate they ran at) and the memory accounting by category, as text tables.
#pragma once
#include <string>

#include "core/allocator_counts.h"
#include "core/memory.h"
#include "runtime/profiler.h"

namespace kiln {

// top_ops > 0 keeps only that many op kinds (the slowest); the rest are summed in one row.
std::string format_profile_report(const ProfileSummary& summary, const MemoryStats& memory, int top_ops = 0);

// The memory table alone: current and peak bytes per category of one device, plus the process's RSS.
std::string format_memory_report(const DeviceMemoryStats& device);

// One line on what a device's allocator asked of its driver during the run (core/allocator_counts.h); empty when
// it asked nothing.
std::string format_allocator_counts(const std::string& device, const AllocatorCounts& counts);

}  // namespace kiln
