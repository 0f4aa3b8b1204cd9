#include "runtime/profile_report.h"

#include <cmath>

#include "runtime/process_usage.h"
#include "runtime/text_table.h"

namespace kiln {

namespace {

std::string percent(double part, double whole) { return whole > 0 ? fixed(100.0 * part / whole, 1) + "%" : "-"; }

std::string memory_table(const ProfileSummary& s, const MemoryStats& memory) {
    return format_memory_report(memory.device(s.device.empty() ? "cpu" : s.device));
}

// Where a GPU backend reported event-timed spans: the host's queueing time beside the GPU's time, ranked by
// the GPU's (the summary's order). The rate is over GPU time, of the calls that were timed.
std::string format_gpu_op_table(const ProfileSummary& s, int top_ops) {
    TextTable ops({"op kind", "calls", "host ms", "GPU calls", "GPU ms", "GPU mean us", "GPU share", "GFLOP",
                   "GFLOP/s"});
    OpKindStats rest;
    int rest_kinds = 0;
    auto row = [&](const std::string& name, const OpKindStats& k, bool mean) {
        ops.add_row({name, std::to_string(k.calls), fixed(k.total_us / 1000.0, 1), std::to_string(k.gpu_calls),
                     fixed(k.gpu_us / 1000.0, 1),
                     mean && k.gpu_calls > 0 ? fixed(k.gpu_us / static_cast<double>(k.gpu_calls), 1) : "-",
                     percent(k.gpu_us, s.wall_us), k.flops > 0 ? fixed(k.flops / 1e9, 1) : "-",
                     mean && k.gpu_flops > 0 && k.gpu_us > 0 ? fixed(k.gpu_flops / (k.gpu_us * 1e3), 1) : "-"});
    };
    for (size_t i = 0; i < s.ops.size(); ++i) {
        const OpKindStats& k = s.ops[i];
        if (top_ops > 0 && i >= static_cast<size_t>(top_ops)) {
            rest.calls += k.calls;
            rest.total_us += k.total_us;
            rest.gpu_calls += k.gpu_calls;
            rest.gpu_us += k.gpu_us;
            rest.flops += k.flops;
            ++rest_kinds;
            continue;
        }
        row(ops::op_name(k.kind), k, true);
    }
    // (append rather than "(" + ...: g++ 12 warns falsely on the latter, -Wrestrict)
    if (rest_kinds > 0) row(std::string("(").append(std::to_string(rest_kinds)).append(" more)"), rest, false);
    std::string out = ops.str();
    out += "(host ms: time to queue the op's kernels; GPU ms: the op's self time on the GPU, between events\n"
           " recorded around its kernels; GPU share: of the wall time; GFLOP/s: the GPU-timed calls' FLOPs over\n"
           " their GPU time, a multiply-add counting 2)\n";
    if (s.dropped_spans > 0 || s.dropped_gpu_spans > 0)
        out.append("(").append(std::to_string(s.dropped_spans)).append(" op calls and ")
            .append(std::to_string(s.dropped_gpu_spans))
            .append(" GPU spans beyond the span limit are in the totals, not in the trace)\n");
    return out;
}

}  // namespace

std::string format_allocator_counts(const std::string& device, const AllocatorCounts& c) {
    if (c.empty()) return "";
    std::string line = "allocator (" + device + "): " + std::to_string(c.device_allocations) +
                       " allocations from the driver (" + fixed(c.device_allocation_ms, 1) + " ms)";
    if (c.give_backs > 0)
        line += "; " + std::to_string(c.give_backs) + " give-backs of " + std::to_string(c.blocks_given_back) +
                " cached blocks, each after a wait for the device (" + fixed(c.give_back_ms, 1) + " ms)";
    return line + "\n";
}

std::string format_memory_report(const DeviceMemoryStats& d) {
    TextTable t({"memory (" + d.device + ")", "current MiB", "peak MiB"});
    for (int k = 0; k < kMemoryCategoryCount; ++k)
        t.add_row({memory_category_name(static_cast<MemoryCategory>(k)), mebibytes(d.categories[k].current),
                   mebibytes(d.categories[k].peak)});
    t.add_row({"total", mebibytes(d.total.current), mebibytes(d.total.peak)});
    return t.str() + "process resident set: " + mebibytes(process_rss_bytes()) + " MiB now, " +
           mebibytes(process_peak_rss_bytes()) + " MiB peak\n";
}

std::string format_profile_report(const ProfileSummary& s, const MemoryStats& memory, int top_ops) {
    const double wall = s.wall_us;
    std::string out = "profile (" + s.device + "): wall " + fixed(wall / 1000.0, 1) + " ms, ops " +
                      fixed(s.op_us / 1000.0, 1) + " ms (" + percent(s.op_us, wall) + ")";
    if (s.has_gpu_time()) {
        std::string devices;
        for (const std::string& d : s.gpu_devices) devices += (devices.empty() ? "" : "+") + d;
        out += ", GPU ops (" + devices + ") " + fixed(s.gpu_op_us / 1000.0, 1) + " ms (" + percent(s.gpu_op_us, wall) +
               ")";
    }
    out += "\n\n";

    TextTable stages({"stage", "calls", "total ms", "mean ms", "share", "op ms", "peak MiB"});
    for (const StageStats& st : s.stages) {
        const bool zones = st.calls > 0;
        stages.add_row({stage_name(st.stage), std::to_string(st.calls), fixed(st.total_us / 1000.0, 1),
                        zones ? fixed(st.total_us / 1000.0 / static_cast<double>(st.calls), 2) : "-",
                        percent(st.total_us, wall), fixed(st.op_us / 1000.0, 1),
                        zones ? mebibytes(st.peak_bytes) : "-"});
    }
    out += stages.str();
    out += "(other: time outside every stage zone, and ops outside them)\n\n";

    if (s.has_gpu_time()) return out + format_gpu_op_table(s, top_ops) + '\n' + memory_table(s, memory);

    TextTable ops({"op kind", "calls", "total ms", "mean us", "share", "GFLOP", "GFLOP/s"});
    size_t shown = 0;
    OpKindStats rest;
    int rest_kinds = 0;
    for (const OpKindStats& k : s.ops) {
        if (top_ops > 0 && shown >= static_cast<size_t>(top_ops)) {
            rest.calls += k.calls;
            rest.total_us += k.total_us;
            rest.flops += k.flops;
            ++rest_kinds;
            continue;
        }
        ++shown;
        const bool counted = k.flops > 0;
        ops.add_row({ops::op_name(k.kind), std::to_string(k.calls), fixed(k.total_us / 1000.0, 1),
                     fixed(k.total_us / static_cast<double>(k.calls), 1), percent(k.total_us, wall),
                     counted ? fixed(k.flops / 1e9, 1) : "-",
                     counted && k.total_us > 0 ? fixed(k.flops / (k.total_us * 1e3), 1) : "-"});
    }
    if (rest_kinds > 0)
        ops.add_row({std::string("(").append(std::to_string(rest_kinds)).append(" more)"), std::to_string(rest.calls),
                     fixed(rest.total_us / 1000.0, 1), "-", percent(rest.total_us, wall),
                     rest.flops > 0 ? fixed(rest.flops / 1e9, 1) : "-", "-"});
    out += ops.str();
    out += "(share: of the wall time; GFLOP/s: FLOPs the op reports over its time, a multiply-add counting 2)\n";
    if (s.dropped_spans > 0)
        out.append("(").append(std::to_string(s.dropped_spans))
            .append(" op calls beyond the span limit are in the totals, not in the trace)\n");
    out += '\n';
    return out + memory_table(s, memory);
}

}  // namespace kiln
