#include "models/device_weights.h"

namespace kiln {

void DeviceWeights::add(std::vector<std::string> names, std::shared_ptr<DeviceBuffer> buffer) {
    if (buffer && buffer->bytes() > 0 && !names.empty()) entries_.push_back({std::move(names), std::move(buffer)});
}

bool DeviceWeights::under(const Entry& e, const std::string& prefix) const {
    for (const std::string& n : e.names)
        if (n.compare(0, prefix.size(), prefix) != 0) return false;
    return true;
}

int64_t DeviceWeights::bytes(const std::string& prefix) const {
    int64_t sum = 0;
    for (const Entry& e : entries_)
        if (under(e, prefix)) sum += e.buffer->bytes();
    return sum;
}

int64_t DeviceWeights::resident_bytes() const {
    int64_t sum = 0;
    for (const Entry& e : entries_)
        if (e.buffer->resident()) sum += e.buffer->bytes();
    return sum;
}

int64_t DeviceWeights::offload(const std::string& prefix) const {
    int64_t moved = 0;
    for (const Entry& e : entries_)
        if (e.buffer->resident() && under(e, prefix)) {
            e.buffer->offload();
            moved += e.buffer->bytes();
        }
    return moved;
}

int64_t DeviceWeights::restore(const std::string& prefix) const {
    int64_t moved = 0;
    Backend* backend = nullptr;
    for (const Entry& e : entries_)
        if (!e.buffer->resident() && under(e, prefix)) {
            e.buffer->restore();
            moved += e.buffer->bytes();
            backend = &e.buffer->backend();
        }
    if (backend && !recording_prefix_.empty()) backend->forget_recordings(recording_prefix_);
    return moved;
}

void DeviceWeights::forget_recordings() const {
    if (!entries_.empty() && !recording_prefix_.empty())
        entries_.front().buffer->backend().forget_recordings(recording_prefix_);
}

}  // namespace kiln
