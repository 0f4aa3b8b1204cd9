// Where a run's time goes: stages of the pipeline (load, tokenize, text encode, each denoising step,
// VAE, image write) as RAII zones, and every op inside them through the ops' observer hook (kind,
// FLOPs, begin/end). The profiler keeps one span per zone and per op call, each on its device's
// timeline, and resolves them into per-stage and per-op-kind figures (summary()) or a Chrome trace
// (chrome_trace.h).
//
// Off by default and free when off: no observer is set, and a StageScope costs one atomic load.
// Zones and op spans are on the host's clock (ProfileTimer, steady_clock by default): on a GPU an op's
// host span is the time to queue its kernels. GPU backends also report the GPU time of each op
// (device_spans, timed with events on the stream: ops/device_spans.h), kept apart as GPU spans with their
// own per-kind totals, placed on the same time axis through steady_clock. Zones and ops are reported from
// one thread (the ops report only from their calling thread).
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/memory.h"
#include "ops/op_observer.h"

namespace kiln {

enum class Stage { Load, Tokenize, TextEncode, DenoiseStep, VaeEncode, VaeDecode, ImageWrite, Other };
constexpr int kStageCount = 8;
const char* stage_name(Stage stage);  // "load", "tokenize", "text_encode", "denoise_step", ...

// A device's clock. mark() notes the present point of the device's timeline (for a GPU: records an
// event on its stream) and must be cheap; microseconds() reads a mark back as time since the timer
// was made, and may wait for the device.
class ProfileTimer {
public:
    virtual ~ProfileTimer() = default;
    virtual std::string device() const = 0;  // the memory-accounting device name ("cpu", "cuda:0")
    virtual uint64_t mark() = 0;
    virtual double microseconds(uint64_t mark) = 0;
};

class CpuTimer : public ProfileTimer {
public:
    CpuTimer();
    std::string device() const override { return "cpu"; }
    uint64_t mark() override;  // nanoseconds since construction (steady_clock)
    double microseconds(uint64_t mark) override { return static_cast<double>(mark) / 1000.0; }

private:
    int64_t origin_ns_;
};

// One zone or op call, resolved to microseconds since the profiler started.
struct ProfileSpan {
    enum class Kind : uint8_t { Stage, Op, GpuOp };
    Kind kind = Kind::Op;
    int code = 0;       // the Stage or ops::OpKind value
    int index = 0;      // stages: the occurrence (0, 1, ... per stage); ops: unused
    int depth = 0;      // nesting: 0 for a top-level zone, its ops 1 deeper (GPU spans: 0 for a top-level op)
    int track = 0;      // GPU spans: index in ProfileSummary::gpu_devices
    double start_us = 0, duration_us = 0;
    double flops = 0;          // ops: as reported by the op (0 when the op does not say)
    int64_t peak_bytes = 0;    // stages: most bytes accounted on the device at once during the zone
    const char* name() const;  // stage_name or ops::op_name
};

struct StageStats {
    Stage stage = Stage::Other;
    int64_t calls = 0;          // zones entered (for Other: explicit Other zones)
    double total_us = 0;        // time inside the stage's zones; for Other, wall time outside every zone too
    double op_us = 0;           // op time inside (for Other: ops outside every zone as well)
    int64_t peak_bytes = 0;     // highest over its zones (Other: 0 unless it had zones)
};

struct OpKindStats {
    ops::OpKind kind = ops::OpKind::Linear;
    int64_t calls = 0;
    double total_us = 0;  // self time: an op called inside another op is not counted twice
    double flops = 0;
    // Measured on the GPU with events around the op's kernels (0 on the CPU, or where none were reported).
    int64_t gpu_calls = 0;
    double gpu_us = 0;     // self time on the GPU: an op inside another op is not counted twice
    double gpu_flops = 0;  // FLOPs of the GPU-timed calls, for their rate
};

struct ProfileSummary {
    std::string device;
    double wall_us = 0;                 // from start() to stop() (or to summary(), while running)
    double op_us = 0;                   // all ops' self time
    std::vector<StageStats> stages;     // stages with calls or time, in enum order (Other last)
    std::vector<OpKindStats> ops;       // op kinds that ran, most time first (GPU time where there is any)
    std::vector<ProfileSpan> spans;     // in start order; empty if spans were not kept
    int64_t dropped_spans = 0;          // op spans beyond the span limit (still in the op totals)
    // GPU time, where a GPU backend reported it.
    std::vector<std::string> gpu_devices;  // "cuda:0", ...: the tracks of gpu_spans
    double gpu_op_us = 0;                  // all GPU-timed ops' self time: how long the GPU ran ops
    std::vector<ProfileSpan> gpu_spans;    // Kind::GpuOp, in start order; empty if spans were not kept
    int64_t dropped_gpu_spans = 0;         // GPU spans beyond the span limit (still in the totals)
    bool has_gpu_time() const { return !gpu_devices.empty(); }
};

class Profiler : public ops::OpObserver {
public:
    explicit Profiler(std::unique_ptr<ProfileTimer> timer = std::make_unique<CpuTimer>());
    ~Profiler() override;
    Profiler(const Profiler&) = delete;
    Profiler& operator=(const Profiler&) = delete;

    // Becomes the process's op observer and stage target. Throws InvalidArgument if another profiler is
    // running. Spans beyond max_spans are folded into the totals and left out of the trace.
    void start(int64_t max_spans = int64_t(1) << 22);
    void stop();  // closes zones left open; the profiler keeps its data
    bool running() const { return running_; }
    // While paused, stages, ops and GPU spans are not recorded and the time does not count as wall time:
    // kiln bench pauses for its warm-up runs. Call between runs, with no stage or op open.
    void pause(bool on);

    void begin_stage(Stage stage);
    void end_stage();
    void begin(ops::OpKind kind, double flops) override;
    void end(ops::OpKind kind) override;
    bool wants_device_spans() const override { return running_; }
    void device_spans(const std::string& device, const std::vector<ops::DeviceOpSpan>& spans) override;
    // steady_clock nanoseconds at start(): time 0 of the summary, for GPU spans on steady_clock.
    int64_t steady_origin_ns() const { return steady_origin_ns_; }

    ProfileSummary summary(bool with_spans = true) const;

private:
    struct RawSpan {
        uint64_t begin = 0, end = 0;
        double flops = 0;
        int64_t peak_bytes = 0;
        int32_t index = 0;
        int32_t parent = -1;  // the enclosing span, -1 at the top
        int16_t code = 0;
        int16_t stage = -1;   // ops: the innermost enclosing stage, -1 outside every zone
        uint8_t kind = 0, depth = 0;
    };
    struct OpenStage {
        size_t span;           // index in spans_
        int64_t peak_so_far;   // memory peak of the parts of this zone before an inner zone began
    };
    struct OpenOp {
        int64_t span;          // index in spans_, or -1 when dropped
        uint64_t begin;
        double flops;
        ops::OpKind kind;
    };
    static constexpr uint64_t kOpen = ~uint64_t(0);  // RawSpan::end of a span not closed yet
    int32_t parent() const { return open_spans_.empty() ? -1 : open_spans_.back(); }
    struct Folded {            // ops beyond the span limit, resolved as they end (whole time, not self time)
        int64_t calls = 0;
        double us = 0, flops = 0;
    };
    struct GpuSpan {
        int64_t start_ns = 0, duration_ns = 0;  // steady_clock
        double flops = 0;
        int16_t code = 0;
        uint8_t depth = 0, track = 0;
    };

    std::unique_ptr<ProfileTimer> timer_;
    MemoryDevice memory_device_;
    bool running_ = false;
    bool paused_ = false;
    uint64_t pause_mark_ = 0;
    double paused_us_ = 0;  // paused time before the current pause
    int64_t max_spans_ = 0;
    uint64_t start_mark_ = 0, stop_mark_ = 0;
    std::vector<RawSpan> spans_;
    std::vector<OpenStage> open_stages_;
    std::vector<OpenOp> open_ops_;
    std::vector<int32_t> open_spans_;  // stages and kept ops, innermost last
    std::array<int32_t, kStageCount> occurrences_{};
    std::vector<Folded> folded_;
    int64_t dropped_ = 0;
    int64_t steady_origin_ns_ = 0;
    std::vector<GpuSpan> gpu_spans_;
    std::vector<std::string> gpu_devices_;
    std::vector<Folded> gpu_totals_;  // per op kind: calls, self time, FLOPs of every GPU span, kept or not
    int64_t dropped_gpu_ = 0;
};

namespace detail {
// Inline so that a StageScope with no profiler running costs one load.
inline std::atomic<Profiler*> g_active_profiler{nullptr};
inline Profiler* active_profiler() { return g_active_profiler.load(std::memory_order_acquire); }
}  // namespace detail

// Marks a stage for the running profiler, if any, for as long as it lives.
class StageScope {
public:
    explicit StageScope(Stage stage) : profiler_(detail::active_profiler()) {
        if (profiler_) profiler_->begin_stage(stage);
    }
    ~StageScope() {
        if (profiler_) profiler_->end_stage();
    }
    StageScope(const StageScope&) = delete;
    StageScope& operator=(const StageScope&) = delete;

private:
    Profiler* profiler_;
};

}  // namespace kiln
