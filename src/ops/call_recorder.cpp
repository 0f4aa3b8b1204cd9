#include "ops/call_recorder.h"

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>

#include "core/dtype.h"
#include "kiln/error.h"
#include "ops/flop_tally.h"

namespace kiln::ops {

int max_recordings_from_env(const char* value) {
    const std::string v = value ? value : "";
    if (v.empty()) return kDefaultMaxRecordings;
    errno = 0;
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    require(std::isdigit(static_cast<unsigned char>(v[0])) && *end == '\0' && errno == 0 && n >= 1 && n <= INT_MAX,
            ErrorKind::InvalidArgument,
            "KILN_RECORDINGS_MAX=" + v + ": expected how many recorded calls a GPU backend keeps, a whole number from 1 (" +
                std::to_string(kDefaultMaxRecordings) +
                " if unset; KILN_CUDA_GRAPHS=0 or KILN_VULKAN_RECORD=0 records none)");
    return int(n);
}

CallRecorder::CallRecorder(RecordingDevice& device, int max_recordings)
    : device_(device), max_recordings_(max_recordings) {
    require(max_recordings >= 1, ErrorKind::InvalidArgument,
            "a call recorder keeps at least 1 recording, not " + std::to_string(max_recordings));
}

int CallRecorder::recordings() const {
    int n = 0;
    for (const auto& [key, r] : recordings_) n += r.work != nullptr;
    return n;
}

Tensor CallRecorder::run(const std::string& key, const std::vector<const Tensor*>& inputs,
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

bool CallRecorder::record(Recording& r, const std::vector<const Tensor*>& inputs, const Backend::RecordedFn& fn) {
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

void CallRecorder::make_room(const Recording& keep) {
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

void CallRecorder::forget(const std::string& key_prefix) {
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

void CallRecorder::clear() noexcept {
    for (auto& [key, r] : recordings_) drop(r);
    recordings_.clear();
}

void CallRecorder::drop(Recording& r) noexcept {
    r.work.reset();
    r.inputs.clear();
    r.output.reset();
    if (r.pool != 0) device_.release_pool(r.pool);
    r.pool = 0;
    r.replays = 0;
    r.flops = {};
}

}  // namespace kiln::ops
