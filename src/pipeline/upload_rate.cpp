#include "pipeline/upload_rate.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/tensor.h"

namespace kiln {

double measure_upload_rate(Backend& backend) {
    constexpr int64_t kBytes = int64_t(32) << 20;
    // The memory restore() uploads from (DeviceBuffer::offload keeps its copy there), else ordinary memory.
    void* pinned = backend.allocate_host(kBytes);
    std::vector<char> ordinary(pinned ? 0 : size_t(kBytes));
    char* host = pinned ? static_cast<char*>(pinned) : ordinary.data();
    std::memset(host, 0, size_t(kBytes));  // its pages in place before the clock starts
    double best = 0;
    try {
        Tensor device = Tensor::empty_on(backend, {kBytes / 4}, DType::F32);
        for (int i = 0; i < 4; ++i) {
            const auto start = std::chrono::steady_clock::now();
            if (pinned) backend.upload_async(device.device_data(), host, kBytes);
            else backend.upload(device.device_data(), host, kBytes);
            backend.synchronize();
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            if (i > 0 && s > 0) best = std::max(best, double(kBytes) / s);
        }
    } catch (...) {
        if (pinned) backend.deallocate_host(pinned);
        throw;
    }
    if (pinned) backend.deallocate_host(pinned);
    return best;
}

}  // namespace kiln
