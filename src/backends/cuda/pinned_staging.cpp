#include "backends/cuda/pinned_staging.h"

#include <algorithm>
#include <cstring>

#include "backends/cuda/cuda_check.h"
#include "kiln/error.h"

namespace kiln::cuda {

PinnedStaging::~PinnedStaging() {
    if (uploaded_) (void)cudaEventDestroy(uploaded_);
    if (buffer_) (void)cudaFreeHost(buffer_);
}

bool PinnedStaging::ready() {
    if (buffer_ || failed_) return buffer_ != nullptr;
    // Pinned memory is a speed-up, not a need: without it, pageable copies from now on.
    if (cudaHostAlloc(&buffer_, size_t(capacity_), cudaHostAllocDefault) != cudaSuccess) buffer_ = nullptr;
    if (buffer_ && cudaEventCreateWithFlags(&uploaded_, cudaEventDisableTiming) != cudaSuccess) {
        (void)cudaFreeHost(buffer_);
        buffer_ = nullptr;
        uploaded_ = nullptr;
    }
    if (!buffer_) {
        (void)cudaGetLastError();  // not an error of the next call
        failed_ = true;
    }
    return buffer_ != nullptr;
}

void PinnedStaging::upload(void* dst, const void* src, int64_t bytes, cudaStream_t stream) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    KILN_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    require(capture == cudaStreamCaptureStatusNone, ErrorKind::Unsupported,
            "an upload from the host inside a recorded GPU call");
    if (!ready()) {
        KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyHostToDevice, stream));
        KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
        return;
    }
    if (bytes <= capacity_) {
        if (used_ + bytes > capacity_) {  // wrap: the queued uploads must be done reading the front
            KILN_CUDA_CHECK(cudaEventSynchronize(uploaded_));
            used_ = 0;
        }
        char* slot = static_cast<char*>(buffer_) + used_;
        std::memcpy(slot, src, size_t(bytes));
        KILN_CUDA_CHECK(cudaMemcpyAsync(dst, slot, size_t(bytes), cudaMemcpyHostToDevice, stream));
        KILN_CUDA_CHECK(cudaEventRecord(uploaded_, stream));
        used_ += (bytes + 255) / 256 * 256;
        return;
    }
    KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
    used_ = 0;
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
    // Queued uploads read the buffer before these copies write it: one stream keeps them in order.
    for (int64_t done = 0; done < bytes;) {
        const int64_t n = std::min(capacity_, bytes - done);
        KILN_CUDA_CHECK(cudaMemcpyAsync(buffer_, static_cast<const char*>(src) + done, size_t(n),
                                        cudaMemcpyDeviceToHost, stream));
        KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
        std::memcpy(static_cast<char*>(dst) + done, buffer_, size_t(n));
        done += n;
    }
    used_ = 0;  // every upload queued before has completed
}

}  // namespace kiln::cuda
