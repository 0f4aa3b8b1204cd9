#include "models/device_weights.h"

namespace kiln {

void DeviceWeights::add(std::vector<std::string> names, std::shared_ptr<DeviceBuffer> buffer) {
    if (buffer && buffer->bytes() > 0 && !names.empty()) entries_.push_back({std::move(names), std::move(buffer)});
}

int64_t DeviceWeights::bytes() const {
    int64_t sum = 0;
    for (const Entry& e : entries_) sum += e.buffer->bytes();
    return sum;
}

int64_t DeviceWeights::resident_bytes() const {
    int64_t sum = 0;
    for (const Entry& e : entries_)
        if (e.buffer->resident()) sum += e.buffer->bytes();
    return sum;
}

void DeviceWeights::offload() const {
    bool moved = false;
    for (const Entry& e : entries_)
        if (e.buffer->resident()) {
            e.buffer->offload();
            moved = true;
        }
    if (moved) forget_recordings();  // they name the addresses given back
}

void DeviceWeights::restore() const {
    bool moved = false;
    for (const Entry& e : entries_)
        if (!e.buffer->resident()) {
            e.buffer->restore();
            moved = true;
        }
    // A streamed UNet's block fetched ahead (UNet::stream_in) is resident already, its copy maybe not done.
    if (!entries_.empty()) entries_.front().buffer->backend().wait_for_uploads_ahead();
    if (moved) forget_recordings();
}

void DeviceWeights::forget_recordings() const {
    if (!entries_.empty() && !recording_prefix_.empty())
        entries_.front().buffer->backend().forget_recordings(recording_prefix_);
}

}  // namespace kiln
