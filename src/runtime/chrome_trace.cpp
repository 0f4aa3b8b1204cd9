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

}  // namespace

void write_chrome_trace(const ProfileSummary& s, std::ostream& out) {
    const std::string device = s.device.empty() ? "cpu" : s.device;
    out << "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"kiln\",\"device\":\"" << device
        << "\",\"wall_us\":" << us(s.wall_us) << ",\"dropped_op_spans\":" << s.dropped_spans << "},\n";
    out << "\"traceEvents\":[\n";
    out << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{\"name\":\"kiln\"}},\n";
    out << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{\"name\":\"" << device << "\"}}";
    for (const ProfileSpan& p : s.spans) {
        const bool stage = p.kind == ProfileSpan::Kind::Stage;
        out << ",\n{\"name\":\"" << p.name() << "\",\"cat\":\"" << (stage ? "stage" : "op")
            << "\",\"ph\":\"X\",\"ts\":" << us(p.start_us) << ",\"dur\":" << us(p.duration_us)
            << ",\"pid\":1,\"tid\":1,\"args\":{";
        if (stage) {
            out << "\"index\":" << p.index << ",\"peak_bytes\":" << p.peak_bytes;
        } else {
            char buf[48];
            std::snprintf(buf, sizeof buf, "%.17g", p.flops);
            out << "\"flops\":" << buf;
        }
        out << "}}";
    }
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
