#include "backends/cuda/pinned_staging.h"

#include <algorithm>
#include <cstring>

#include "backends/cuda/cuda_check.h"

namespace kiln::cuda {

PinnedStaging::~PinnedStaging() {
    if (buffer_) (void)cudaFreeHost(buffer_);
}

bool PinnedStaging::ready() {
    if (buffer_ || failed_) return buffer_ != nullptr;
    if (cudaHostAlloc(&buffer_, size_t(capacity_), cudaHostAllocDefault) != cudaSuccess) {
        (void)cudaGetLastError();  // not an error of the next call
        buffer_ = nullptr;
        failed_ = true;  // pinned memory is a speed-up, not a need: pageable copies from now on
    }
    return buffer_ != nullptr;
}

void PinnedStaging::upload(void* dst, const void* src, int64_t bytes, cudaStream_t stream) {
    if (!ready()) {
        KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyHostToDevice, stream));
        KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
        return;
    }
    for (int64_t done = 0; done < bytes;) {
        const int64_t n = std::min(capacity_, bytes - done);
        // The previous piece's transfer has finished (synchronised below) before the buffer is written again.
        std::memcpy(buffer_, static_cast<const char*>(src) + done, size_t(n));
        KILN_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + done, buffer_, size_t(n), cudaMemcpyHostToDevice,
                                        stream));
        KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
        done += n;
    }
}

void PinnedStaging::download(void* dst, const void* src, int64_t bytes, cudaStream_t stream) {
    if (!ready()) {
        KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDeviceToHost, stream));
        KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
        return;
    }
    for (int64_t done = 0; done < bytes;) {
        const int64_t n = std::min(capacity_, bytes - done);
        KILN_CUDA_CHECK(cudaMemcpyAsync(buffer_, static_cast<const char*>(src) + done, size_t(n),
                                        cudaMemcpyDeviceToHost, stream));
        KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
        std::memcpy(static_cast<char*>(dst) + done, buffer_, size_t(n));
        done += n;
    }
}

}  // namespace kiln::cuda
