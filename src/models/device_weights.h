// A component's weights on a GPU, by weight name, so that a memory budget (--vram) can move them off the device
// and back: the text encoders present only while the prompt is encoded, the VAE only while it decodes, the
// UNet block by block inside each call (streamed). Offloaded bytes wait in host memory (DeviceBuffer::offload);
// moving never changes a value. The GPU counterpart of WeightPages (weight_pages.h), which drops a CPU
// run's file pages instead.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"

namespace kiln {

class DeviceWeights {
public:
    struct Entry {
        // The weights whose values the buffer holds: one, or several stacked into one product
        // (WeightReader::get_matrix_stack).
        std::vector<std::string> names;
        std::shared_ptr<DeviceBuffer> buffer;
    };
    void add(std::vector<std::string> names, std::shared_ptr<DeviceBuffer> buffer);
    const std::vector<Entry>& entries() const { return entries_; }
    int64_t bytes() const;           // every buffer's, resident or not
    int64_t resident_bytes() const;  // of the buffers on the device now
    // Every buffer leaves the device (offload) or comes back (restore). Either, where it moved anything, forgets
    // the backend's recorded calls whose keys start with the recording prefix: they hold the old addresses.
    // (The UNet streams its blocks' buffers itself: UNet::stream_in/out.)
    void offload() const;
    void restore() const;
    // The start of the keys of the component's recorded calls (Backend::run_recorded).
    void set_recording_prefix(std::string prefix) { recording_prefix_ = std::move(prefix); }
    // Forgets those calls (for a caller that moved buffers itself).
    void forget_recordings() const;

private:
    std::vector<Entry> entries_;
    std::string recording_prefix_;
};

}  // namespace kiln
