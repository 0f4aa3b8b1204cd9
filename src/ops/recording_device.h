// What a GPU backend implements for its recorded calls (CallRecorder, ops/call_recorder.h): the steps of
// recording that differ between devices. Apart from the recorder itself so that a backend's header can name the
// interface without the recorder's containers (HIP's device compile of Debian's clang 15 crashes instantiating
// them: scripts/hip-compile-check.sh).
#pragma once
#include <memory>

namespace kiln::ops {

// A device's form of one recorded call (a CUDA graph, a Vulkan command buffer). Destroying it frees it;
// CallRecorder does so only once the device has finished every replay (RecordingDevice::wait_idle), or when
// it was never run.
class RecordedWork {
public:
    virtual ~RecordedWork() = default;
    virtual void replay() = 0;  // runs it again, after the work queued before it; its inputs are in place
};

// The steps of recording that differ between devices, for CallRecorder.
class RecordingDevice {
public:
    virtual ~RecordingDevice() = default;
    // Whether a call may be recorded or replayed now; while not, every call runs eagerly (recordings are kept).
    virtual bool recording_enabled() const = 0;
    // The allocator's pools: while a pool is in use, allocations come from it; pool 0 is the ordinary one.
    virtual int new_pool() = 0;
    virtual void use_pool(int pool) = 0;
    virtual void release_pool(int pool) noexcept = 0;  // its blocks go back, now or when they are freed
    // Before a recording's pool is made (Vulkan runs the work queued so far).
    virtual void before_recording() {}
    // From begin_recording the work queued is recorded, not run, until end_recording (which returns it) or
    // abort_recording (the recorded function threw). begin_recording and end_recording, where they throw, leave
    // nothing begun behind them.
    virtual void begin_recording() = 0;
    virtual std::unique_ptr<RecordedWork> end_recording() = 0;
    virtual void abort_recording() noexcept = 0;
    // Returns once the device has finished all work queued (a replay may still read a pool about to go).
    virtual void wait_idle() = 0;
};

}  // namespace kiln::ops
