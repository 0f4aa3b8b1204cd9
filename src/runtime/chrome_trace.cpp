#include "runtime/chrome_trace.h"

#include <cmath>
#include <cstdio>
#include <fstream>

#include "kiln/error.h"

namespace kiln {

namespace {

// Microseconds to the nanosecond: a child's ts and ts + dur then stay inside its parent's after
// rounding, which is what the viewers nest by.
std::string us(double v) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.3f", std::round(v * 1000.0) / 1000.0);
    return buf;
}

std::string number(double v) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
}

// The host's zones and ops are thread 1; GPU device i's ops are thread 2 + i, below it in the viewer.
constexpr int kHostTid = 1;
int gpu_tid(int track) { return 2 + track; }

}  // namespace

void write_chrome_trace(const ProfileSummary& s, std::ostream& out) {
    const std::string device = s.device.empty() ? "cpu" : s.device;
    out << "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"kiln\",\"device\":\"" << device
        << "\",\"wall_us\":" << us(s.wall_us) << ",\"dropped_op_spans\":" << s.dropped_spans
        << ",\"dropped_gpu_spans\":" << s.dropped_gpu_spans << "},\n";
    out << "\"traceEvents\":[\n";
    out << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{\"name\":\"kiln\"}},\n";
    out << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":" << kHostTid << ",\"args\":{\"name\":\"" << device
        << "\"}}";
    for (size_t i = 0; i < s.gpu_devices.size(); ++i) {
        const int tid = gpu_tid(int(i));
        out << ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":" << tid << ",\"args\":{\"name\":\"GPU "
            << s.gpu_devices[i] << "\"}}";
        out << ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":" << tid
            << ",\"args\":{\"sort_index\":" << tid << "}}";
    }
    for (const ProfileSpan& p : s.spans) {
        const bool stage = p.kind == ProfileSpan::Kind::Stage;
        out << ",\n{\"name\":\"" << p.name() << "\",\"cat\":\"" << (stage ? "stage" : "op")
            << "\",\"ph\":\"X\",\"ts\":" << us(p.start_us) << ",\"dur\":" << us(p.duration_us)
            << ",\"pid\":1,\"tid\":" << kHostTid << ",\"args\":{";
        if (stage) {
            out << "\"index\":" << p.index << ",\"peak_bytes\":" << p.peak_bytes;
        } else {
            out << "\"flops\":" << number(p.flops);
        }
        out << "}}";
    }
    // GPU time of each op, measured with events on the device's stream, on the same time axis.
    for (const ProfileSpan& p : s.gpu_spans)
        out << ",\n{\"name\":\"" << p.name() << "\",\"cat\":\"gpu_op\",\"ph\":\"X\",\"ts\":" << us(p.start_us)
            << ",\"dur\":" << us(p.duration_us) << ",\"pid\":1,\"tid\":" << gpu_tid(p.track)
            << ",\"args\":{\"flops\":" << number(p.flops) << "}}";
    out << "\n]}\n";
}

void write_chrome_trace_file(const ProfileSummary& summary, const std::string& path) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    require(f.good(), ErrorKind::IO, "cannot write trace file " + path);
    write_chrome_trace(summary, f);
    f.flush();
    require(f.good(), ErrorKind::IO, "cannot write trace file " + path + " (disk full?)");
}

}  // namespace kiln
