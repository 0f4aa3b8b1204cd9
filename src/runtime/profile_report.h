// The --profile report: per stage (calls, time, share, op time, peak memory), per op kind (calls,
// time, share, FLOPs and the rate they ran at) and the memory accounting by category, as text tables.
#pragma once
#include <string>

#include "core/memory.h"
#include "runtime/profiler.h"

namespace kiln {

// top_ops > 0 keeps only that many op kinds (the slowest); the rest are summed in one row.
std::string format_profile_report(const ProfileSummary& summary, const MemoryStats& memory, int top_ops = 0);

// The memory table alone: current and peak bytes per category of one device, plus the process's RSS.
std::string format_memory_report(const DeviceMemoryStats& device);

}  // namespace kiln
