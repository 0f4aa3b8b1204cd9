// A profile as a Chrome trace (Trace Event Format, JSON object form), which Perfetto
// (ui.perfetto.dev) and chrome://tracing open: one complete ("X") event per stage zone and per op
// call, ts/dur in microseconds since the profiler started, all on one thread track named after the
// device, so that each op sits inside its stage on the timeline. GPU time reported by a GPU backend
// goes on a track of its own per device ("GPU cuda:0", tid 2, 3, ...; "cat": "gpu_op"), on the same
// time axis, so that each kernel group shows where it ran relative to the host call that queued it.
#pragma once
#include <ostream>
#include <string>

#include "runtime/profiler.h"

namespace kiln {

void write_chrome_trace(const ProfileSummary& summary, std::ostream& out);
// Throws kiln::Error (IO) naming the file when it cannot be written.
void write_chrome_trace_file(const ProfileSummary& summary, const std::string& path);

}  // namespace kiln
