#include "runtime/profiler.h"

#include <algorithm>
#include <chrono>

#include "kiln/error.h"

namespace kiln {

namespace {

int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

}  // namespace

const char* stage_name(Stage stage) {
    switch (stage) {
        case Stage::Load: return "load";
        case Stage::Tokenize: return "tokenize";
        case Stage::TextEncode: return "text_encode";
        case Stage::DenoiseStep: return "denoise_step";
        case Stage::VaeEncode: return "vae_encode";
        case Stage::VaeDecode: return "vae_decode";
        case Stage::ImageWrite: return "image_write";
        case Stage::Other: return "other";
    }
    return "unknown";
}

const char* ProfileSpan::name() const {
    return kind == Kind::Stage ? stage_name(static_cast<Stage>(code)) : ops::op_name(static_cast<ops::OpKind>(code));
}

CpuTimer::CpuTimer() : origin_ns_(steady_ns()) {}
uint64_t CpuTimer::mark() { return static_cast<uint64_t>(steady_ns() - origin_ns_); }

Profiler::Profiler(std::unique_ptr<ProfileTimer> timer)
    : timer_(std::move(timer)),
      memory_device_(memory_device(timer_->device())),
      folded_(ops::kOpCount),
      gpu_totals_(ops::kOpCount) {}

Profiler::~Profiler() { stop(); }

void Profiler::start(int64_t max_spans) {
    require(!running_, ErrorKind::InvalidArgument, "profiler: already started");
    Profiler* none = nullptr;
    require(detail::g_active_profiler.compare_exchange_strong(none, this), ErrorKind::InvalidArgument,
            "profiler: another profiler is running");
    max_spans_ = std::max<int64_t>(max_spans, 0);
    spans_.clear();
    spans_.reserve(static_cast<size_t>(std::min<int64_t>(max_spans_, int64_t(1) << 16)));
    open_stages_.clear();
    open_ops_.clear();
    open_spans_.clear();
    occurrences_.fill(0);
    folded_.assign(ops::kOpCount, Folded{});
    dropped_ = 0;
    gpu_spans_.clear();
    gpu_devices_.clear();
    gpu_totals_.assign(ops::kOpCount, Folded{});
    dropped_gpu_ = 0;
    paused_ = false;
    paused_us_ = 0;
    running_ = true;
    start_mark_ = timer_->mark();
    steady_origin_ns_ = steady_ns();
    ops::set_op_observer(this);
}

void Profiler::pause(bool on) {
    if (!running_ || on == paused_) return;
    const uint64_t now = timer_->mark();
    if (on)
        pause_mark_ = now;
    else
        paused_us_ += timer_->microseconds(now) - timer_->microseconds(pause_mark_);
    paused_ = on;
}

void Profiler::stop() {
    if (!running_) return;
    pause(false);
    while (!open_ops_.empty()) end(open_ops_.back().kind);
    while (!open_stages_.empty()) end_stage();
    stop_mark_ = timer_->mark();
    if (ops::op_observer() == this) ops::set_op_observer(nullptr);
    running_ = false;
    detail::g_active_profiler.store(nullptr, std::memory_order_release);
}

void Profiler::begin_stage(Stage stage) {
    if (!running_ || paused_) return;
    const uint64_t now = timer_->mark();
    if (!open_stages_.empty())
        open_stages_.back().peak_so_far = std::max(open_stages_.back().peak_so_far, memory_window_peak(memory_device_));
    reset_memory_window(memory_device_);
    RawSpan s;
    s.begin = now;
    s.end = kOpen;
    s.kind = static_cast<uint8_t>(ProfileSpan::Kind::Stage);
    s.code = static_cast<int16_t>(stage);
    s.index = occurrences_[static_cast<int>(stage)]++;
    s.parent = parent();
    s.depth = static_cast<uint8_t>(std::min<size_t>(open_spans_.size(), 255));
    s.stage = open_stages_.empty() ? -1 : spans_[open_stages_.back().span].code;
    // Zones are always kept: there are few of them, and the trace needs every one.
    spans_.push_back(s);
    const int32_t idx = static_cast<int32_t>(spans_.size() - 1);
    open_stages_.push_back({static_cast<size_t>(idx), memory_window_peak(memory_device_)});
    open_spans_.push_back(idx);
}

void Profiler::end_stage() {
    if (!running_ || paused_ || open_stages_.empty()) return;
    const uint64_t now = timer_->mark();
    const OpenStage os = open_stages_.back();
    open_stages_.pop_back();
    const int64_t peak = std::max(os.peak_so_far, memory_window_peak(memory_device_));
    RawSpan& s = spans_[os.span];
    s.end = now;
    s.peak_bytes = peak;
    // Ops are closed by their scopes before the zone that holds them; pop to this zone regardless.
    while (!open_spans_.empty()) {
        const int32_t top = open_spans_.back();
        open_spans_.pop_back();
        if (top == static_cast<int32_t>(os.span)) break;
    }
    if (!open_stages_.empty()) {
        open_stages_.back().peak_so_far = std::max(open_stages_.back().peak_so_far, peak);
        reset_memory_window(memory_device_);
    }
}

void Profiler::begin(ops::OpKind kind, double flops) {
    if (!running_ || paused_) return;
    const uint64_t now = timer_->mark();
    if (static_cast<int64_t>(spans_.size()) >= max_spans_) {
        open_ops_.push_back({-1, now, flops, kind});
        return;
    }
    RawSpan s;
    s.begin = now;
    s.end = kOpen;
    s.flops = flops;
    s.kind = static_cast<uint8_t>(ProfileSpan::Kind::Op);
    s.code = static_cast<int16_t>(kind);
    s.parent = parent();
    s.depth = static_cast<uint8_t>(std::min<size_t>(open_spans_.size(), 255));
    s.stage = open_stages_.empty() ? -1 : spans_[open_stages_.back().span].code;
    spans_.push_back(s);
    const int32_t idx = static_cast<int32_t>(spans_.size() - 1);
    open_ops_.push_back({idx, now, flops, kind});
    open_spans_.push_back(idx);
}

void Profiler::end(ops::OpKind) {
    if (!running_ || paused_ || open_ops_.empty()) return;
    const uint64_t now = timer_->mark();
    const OpenOp o = open_ops_.back();
    open_ops_.pop_back();
    if (o.span < 0) {
        const int k = static_cast<int>(o.kind);
        if (k >= 0 && k < ops::kOpCount) {
            Folded& f = folded_[k];
            ++f.calls;
            f.us += timer_->microseconds(now) - timer_->microseconds(o.begin);
            f.flops += o.flops;
        }
        ++dropped_;
        return;
    }
    spans_[o.span].end = now;
    if (!open_spans_.empty() && open_spans_.back() == o.span) open_spans_.pop_back();
}

void Profiler::device_spans(const std::string& device, const std::vector<ops::DeviceOpSpan>& spans) {
    if (!running_ || paused_ || spans.empty()) return;
    size_t track = std::find(gpu_devices_.begin(), gpu_devices_.end(), device) - gpu_devices_.begin();
    if (track == gpu_devices_.size()) gpu_devices_.push_back(device);
    for (const ops::DeviceOpSpan& d : spans) {
        const int k = static_cast<int>(d.kind);
        if (k < 0 || k >= ops::kOpCount) continue;
        Folded& t = gpu_totals_[k];
        ++t.calls;
        t.us += static_cast<double>(d.self_ns) / 1000.0;
        t.flops += d.flops;
        if (static_cast<int64_t>(gpu_spans_.size()) >= max_spans_) {
            ++dropped_gpu_;
            continue;
        }
        gpu_spans_.push_back({d.start_ns, d.duration_ns, d.flops, static_cast<int16_t>(k),
                              static_cast<uint8_t>(std::clamp(d.depth, 0, 255)),
                              static_cast<uint8_t>(std::min<size_t>(track, 255))});
    }
}

ProfileSummary Profiler::summary(bool with_spans) const {
    ProfileSummary out;
    out.device = timer_->device();
    const double t0 = timer_->microseconds(start_mark_);
    const double t_end = timer_->microseconds(running_ ? timer_->mark() : stop_mark_);
    const double paused_now = running_ && paused_ ? timer_->microseconds(timer_->mark()) - timer_->microseconds(pause_mark_) : 0.0;
    out.wall_us = std::max(0.0, t_end - t0 - paused_us_ - paused_now);

    const size_t n = spans_.size();
    std::vector<double> start(n), duration(n), self(n);
    for (size_t i = 0; i < n; ++i) {
        const RawSpan& s = spans_[i];
        start[i] = timer_->microseconds(s.begin) - t0;
        const double end = s.end == kOpen ? out.wall_us : timer_->microseconds(s.end) - t0;
        duration[i] = std::max(0.0, end - start[i]);
        self[i] = duration[i];
    }
    // An op inside another op (none do today) would otherwise count twice.
    for (size_t i = 0; i < n; ++i) {
        const RawSpan& s = spans_[i];
        if (s.kind == static_cast<uint8_t>(ProfileSpan::Kind::Op) && s.parent >= 0 &&
            spans_[s.parent].kind == static_cast<uint8_t>(ProfileSpan::Kind::Op))
            self[s.parent] -= duration[i];
    }

    std::array<StageStats, kStageCount> stages{};
    for (int k = 0; k < kStageCount; ++k) stages[k].stage = static_cast<Stage>(k);
    std::vector<OpKindStats> kinds(ops::kOpCount);
    for (int k = 0; k < ops::kOpCount; ++k) {
        kinds[k].kind = static_cast<ops::OpKind>(k);
        kinds[k].calls = folded_[k].calls;
        kinds[k].total_us = folded_[k].us;
        kinds[k].flops = folded_[k].flops;
        kinds[k].gpu_calls = gpu_totals_[k].calls;
        kinds[k].gpu_us = gpu_totals_[k].us;
        kinds[k].gpu_flops = gpu_totals_[k].flops;
    }
    double top_level_zone_us = 0;
    for (size_t i = 0; i < n; ++i) {
        const RawSpan& s = spans_[i];
        if (s.kind == static_cast<uint8_t>(ProfileSpan::Kind::Stage)) {
            StageStats& st = stages[s.code];
            ++st.calls;
            st.total_us += duration[i];
            st.peak_bytes = std::max(st.peak_bytes, s.peak_bytes);
            if (s.depth == 0) top_level_zone_us += duration[i];
        } else {
            OpKindStats& k = kinds[s.code];
            ++k.calls;
            k.total_us += self[i];
            k.flops += s.flops;
            stages[s.stage >= 0 ? s.stage : static_cast<int>(Stage::Other)].op_us += self[i];
        }
    }
    for (int k = 0; k < ops::kOpCount; ++k) {
        // Folded ops have no stage on record; they count towards Other.
        stages[static_cast<int>(Stage::Other)].op_us += folded_[k].us;
    }
    stages[static_cast<int>(Stage::Other)].total_us += std::max(0.0, out.wall_us - top_level_zone_us);

    for (const StageStats& st : stages)
        if (st.calls > 0 || (st.stage == Stage::Other && (st.total_us > 0 || st.op_us > 0))) out.stages.push_back(st);
    out.gpu_devices = gpu_devices_;
    for (const OpKindStats& k : kinds)
        if (k.calls > 0 || k.gpu_calls > 0) {
            out.ops.push_back(k);
            out.op_us += k.total_us;
            out.gpu_op_us += k.gpu_us;
        }
    // On a GPU the host's time is that of queueing: rank by GPU time where there is any.
    const bool by_gpu = out.has_gpu_time();
    std::stable_sort(out.ops.begin(), out.ops.end(), [by_gpu](const OpKindStats& a, const OpKindStats& b) {
        return by_gpu ? a.gpu_us > b.gpu_us : a.total_us > b.total_us;
    });

    if (with_spans) {
        out.spans.reserve(n);
        for (size_t i = 0; i < n; ++i) {
            const RawSpan& s = spans_[i];
            ProfileSpan p;
            p.kind = static_cast<ProfileSpan::Kind>(s.kind);
            p.code = s.code;
            p.index = s.index;
            p.depth = s.depth;
            p.start_us = start[i];
            p.duration_us = duration[i];
            p.flops = s.flops;
            p.peak_bytes = s.peak_bytes;
            out.spans.push_back(p);
        }
    }
    out.dropped_spans = dropped_;
    if (with_spans) {
        out.gpu_spans.reserve(gpu_spans_.size());
        for (const GpuSpan& g : gpu_spans_) {
            ProfileSpan p;
            p.kind = ProfileSpan::Kind::GpuOp;
            p.code = g.code;
            p.depth = g.depth;
            p.track = g.track;
            p.start_us = static_cast<double>(g.start_ns - steady_origin_ns_) / 1000.0;
            p.duration_us = static_cast<double>(g.duration_ns) / 1000.0;
            p.flops = g.flops;
            out.gpu_spans.push_back(p);
        }
        // Batches arrive in stream order per device; with several devices, interleave them by time.
        std::stable_sort(out.gpu_spans.begin(), out.gpu_spans.end(),
                         [](const ProfileSpan& a, const ProfileSpan& b) { return a.start_us < b.start_us; });
    }
    out.dropped_gpu_spans = dropped_gpu_;
    return out;
}

}  // namespace kiln
