// Page-locked host memory that the CUDA backend's uploads and downloads pass through. A copy from or to
// pageable memory (a std::vector's) makes the driver stage it itself. On the GPU machine (session 9, H200 in a
// VM), with pageable copies, a sampler step's two uploads took 380 us (their fp16 conversion on the host
// included) and bringing a 512x512 image back 3.6 ms (its widening included); every step moves its latents
// both ways, and a txt2img its image. Through a buffer pinned once, each piece is one
// memcpy on the host and one DMA transfer, and an upload that fits does not wait for its transfer: the
// buffer is used front to back, and only when it wraps does the host wait for the transfers still reading it.
#pragma once
#include <cstdint>

#include "backends/cuda/gpu_runtime.h"

namespace kiln::cuda {

class PinnedStaging {
public:
    // Transfers larger than capacity go through it in pieces, each waited for.
    explicit PinnedStaging(int64_t capacity = int64_t(8) << 20) : capacity_(capacity) {}
    ~PinnedStaging();
    PinnedStaging(const PinnedStaging&) = delete;
    PinnedStaging& operator=(const PinnedStaging&) = delete;

    // Returns once src may be reused; the device's copy is ordered on stream before the work queued after it.
    // Not inside a stream capture (a graph would keep reading the buffer's later contents): Unsupported.
    void upload(void* dst, const void* src, int64_t bytes, cudaStream_t stream);
    // Returns once dst holds the bytes, after the work queued on stream before it.
    void download(void* dst, const void* src, int64_t bytes, cudaStream_t stream);

private:
    bool ready();  // allocates the buffer and event on first use; false if the host refused to pin memory

    int64_t capacity_;
    void* buffer_ = nullptr;
    cudaEvent_t uploaded_ = nullptr;  // recorded after the last asynchronous upload
    int64_t used_ = 0;                // bytes from the front of buffer_ that queued uploads may still read
    bool failed_ = false;
};

}  // namespace kiln::cuda
