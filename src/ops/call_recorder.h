// Recorded calls for the GPU backends (Backend::run_recorded), one copy of the bookkeeping for CUDA graphs and
// Vulkan command buffers. A key's first call runs eagerly: it loads kernels and picks algorithms, which a
// recording cannot. Its second is recorded by the device into a memory pool of its own, on copies of its inputs
// made in that pool, and run; later calls copy their inputs into the recording's and replay it. A call that
// cannot be recorded (an Error while recording: a host round trip inside, say) runs eagerly from then on. The
// FLOPs the ops reported while a call was recorded are reported again at each replay (flop_tally.h), when no
// op runs on the host. Recordings are forgotten by key prefix (their weights moved) and, past a bound on how
// many are kept, the least recently used one is evicted. What differs between devices is RecordingDevice's.
//
// It lives in ops, not core, because it reports FLOPs through the op observer (ops/op_observer.h), which core
// does not see; and it is header-only, as that observer is, because the CUDA backend links no compiled code of
// ops (tests/cuda/standalone builds it with core alone). Not thread-safe: the backend calls it from the thread
// that drives its stream.
#pragma once
#include <array>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "kiln/error.h"
#include "ops/flop_tally.h"
#include "ops/op_list.h"
#include "ops/recording_device.h"

namespace kiln::ops {

// How many recordings a backend keeps unless KILN_RECORDINGS_MAX says otherwise. A generation holds few: the
// UNet's call per latent and context shape, and a text encoder's per shape (SDXL's two), with a second UNet
// shape where a hires pass or a longer prompt comes; gpu_memory_plan.cpp forgets a stage's recordings where it
// does not keep everything. 8 leaves such a run evicting nothing, while a process that sees many shapes (the
// bench's sweeps, a server) keeps 8 pools of activations instead of one for every shape it ever ran.
constexpr int kDefaultMaxRecordings = 8;
// KILN_RECORDINGS_MAX's value: unset or empty, kDefaultMaxRecordings; else a whole number from 1, or
// InvalidArgument naming the setting.
inline int max_recordings_from_env(const char* value);

class CallRecorder {
public:
    // max_recordings >= 1 (else InvalidArgument).
    CallRecorder(RecordingDevice& device, int max_recordings);
    // Its tensors are freed without the device's help: a backend calls clear() first, while its allocator lives.
    ~CallRecorder() = default;
    CallRecorder(const CallRecorder&) = delete;
    CallRecorder& operator=(const CallRecorder&) = delete;

    // Backend::run_recorded. Inputs on the device, with the shapes and dtypes of the recording's on a replay
    // (else InvalidArgument naming the key and the input); the result is a fresh tensor in the ordinary pool.
    Tensor run(const std::string& key, const std::vector<const Tensor*>& inputs, const Backend::RecordedFn& fn);
    // Backend::forget_recordings: the recordings (and failed keys) whose keys start with key_prefix, after the
    // device has finished with them; their next call runs eagerly again.
    void forget(const std::string& key_prefix);
    // Drops every recording (pools released) without waiting: for the backend's destructor, its device idle.
    void clear() noexcept;

    int recordings() const;  // kept now
    int max_recordings() const { return max_recordings_; }
    int64_t evictions() const { return evictions_; }

private:
    struct Recording {
        int calls = 0;
        bool failed = false;  // could not be recorded: eager from now on
        int pool = 0;
        std::vector<Tensor> inputs;  // in the pool
        std::unique_ptr<Tensor> output;  // in the pool, written by each replay
        std::unique_ptr<RecordedWork> work;
        int replays = 0;
        uint64_t last_used = 0;  // the recorder's clock at its latest replay, for eviction
        std::array<double, kOpCount> flops{};  // per op kind, reported again at each replay
    };
    // Records fn for r on copies of inputs; false where it cannot be (r is then failed, its pool released).
    bool record(Recording& r, const std::vector<const Tensor*>& inputs, const Backend::RecordedFn& fn);
    // Evicts the least recently used recordings other than `keep` until one more fits under the bound.
    void make_room(const Recording& keep);
    void drop(Recording& r) noexcept;  // its work, tensors and pool; the device must be done with them

    RecordingDevice& device_;
    int max_recordings_;
    std::map<std::string, Recording> recordings_;
    uint64_t clock_ = 0;
    int64_t evictions_ = 0;
};

// ---- definitions (header-only: see the top) ----

inline int max_recordings_from_env(const char* value) {
    const std::string v = value ? value : "";
    if (v.empty()) return kDefaultMaxRecordings;
    errno = 0;
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    require(std::isdigit(static_cast<unsigned char>(v[0])) && *end == '\0' && errno == 0 && n >= 1 && n <= INT_MAX,
            ErrorKind::InvalidArgument,
            "KILN_RECORDINGS_MAX=" + v + ": expected how many recorded calls a GPU backend keeps, a whole number " +
                "from 1 (" + std::to_string(kDefaultMaxRecordings) +
                " if unset; KILN_CUDA_GRAPHS=0 or KILN_VULKAN_RECORD=0 records none)");
    return int(n);
}

inline CallRecorder::CallRecorder(RecordingDevice& device, int max_recordings)
    : device_(device), max_recordings_(max_recordings) {
    require(max_recordings >= 1, ErrorKind::InvalidArgument,
            "a call recorder keeps at least 1 recording, not " + std::to_string(max_recordings));
}

inline int CallRecorder::recordings() const {
    int n = 0;
    for (const auto& [key, r] : recordings_) n += r.work != nullptr;
    return n;
}

inline Tensor CallRecorder::run(const std::string& key, const std::vector<const Tensor*>& inputs,
                                const Backend::RecordedFn& fn) {
    Recording& r = recordings_[key];
    ++r.calls;
    if (!device_.recording_enabled() || r.failed || r.calls == 1) return fn(inputs);
    if (!r.work) {
        if (!record(r, inputs, fn)) return fn(inputs);
    } else {
        require(inputs.size() == r.inputs.size(), ErrorKind::InvalidArgument,
                "recorded call '" + key + "': " + std::to_string(inputs.size()) + " inputs, recorded with " +
                    std::to_string(r.inputs.size()));
        for (size_t i = 0; i < inputs.size(); ++i) {
            require(inputs[i]->shape() == r.inputs[i].shape() && inputs[i]->dtype() == r.inputs[i].dtype(),
                    ErrorKind::InvalidArgument,
                    "recorded call '" + key + "': input " + std::to_string(i) + " changed shape or dtype");
            r.inputs[i].backend().copy(r.inputs[i].device_data(), inputs[i]->device_data(),
                                       inputs[i]->numel() * int64_t(dtype_size(inputs[i]->dtype())));
        }
    }
    r.last_used = ++clock_;
    if (r.replays++ > 0) report_flops(r.flops);  // the first run's were reported while it was recorded
    r.work->replay();
    return Tensor(*r.output);  // a copy in the ordinary pool: the next replay overwrites the recording's
}

inline bool CallRecorder::record(Recording& r, const std::vector<const Tensor*>& inputs,
                                 const Backend::RecordedFn& fn) {
    make_room(r);
    device_.before_recording();
    r.pool = device_.new_pool();
    device_.use_pool(r.pool);
    try {
        for (const Tensor* t : inputs) r.inputs.push_back(*t);  // copies into the recording's pool
        std::vector<const Tensor*> views;
        for (const Tensor& t : r.inputs) views.push_back(&t);
        device_.begin_recording();
        try {
            FlopTally tally;
            r.output = std::make_unique<Tensor>(fn(views));
            r.flops = tally.flops();
        } catch (...) {
            device_.abort_recording();
            throw;
        }
        r.work = device_.end_recording();
    } catch (const Error&) {
        // Not recordable (a host round trip inside, say): this key runs eagerly from now on.
        device_.use_pool(0);
        drop(r);
        r.failed = true;
        return false;
    } catch (...) {
        device_.use_pool(0);
        drop(r);  // not an answer about the call (out of host memory, say): its next call tries again
        throw;
    }
    device_.use_pool(0);
    return true;
}

inline void CallRecorder::make_room(const Recording& keep) {
    bool waited = false;
    while (recordings() >= max_recordings_) {
        Recording* oldest = nullptr;
        for (auto& [key, r] : recordings_)
            if (r.work && &r != &keep && (!oldest || r.last_used < oldest->last_used)) oldest = &r;
        if (!oldest) return;
        if (!waited) device_.wait_idle();  // a replay may still read its pool
        waited = true;
        drop(*oldest);
        oldest->calls = 1;  // its eager first call was made: its next call records it again
        ++evictions_;
    }
}

inline void CallRecorder::forget(const std::string& key_prefix) {
    bool waited = false;
    for (auto it = recordings_.begin(); it != recordings_.end();) {
        if (it->first.compare(0, key_prefix.size(), key_prefix) != 0) {
            ++it;
            continue;
        }
        if (it->second.work) {
            if (!waited) device_.wait_idle();  // a replay may still read the pool
            waited = true;
            drop(it->second);  // a failed recording's pool went when it failed
        }
        it = recordings_.erase(it);
    }
}

inline void CallRecorder::clear() noexcept {
    for (auto& [key, r] : recordings_) drop(r);
    recordings_.clear();
}

inline void CallRecorder::drop(Recording& r) noexcept {
    r.work.reset();
    r.inputs.clear();
    r.output.reset();
    if (r.pool != 0) device_.release_pool(r.pool);
    r.pool = 0;
    r.replays = 0;
    r.flops = {};
}

}  // namespace kiln::ops
