// Page-locked host memory that the CUDA backend's uploads and downloads pass through. A copy from or to
// pageable memory (a std::vector's) makes the driver stage it itself, and on the GPU machine that cost
// 190 us for a 64 KB upload and 3.6 ms for a 1.5 MB download (session 9, H200 in a VM): every sampler step
// moves its latents both ways, and a txt2img its image. Through a buffer pinned once, each piece is one
// memcpy on the host and one DMA transfer.
#pragma once
#include <cstdint>

#include "backends/cuda/gpu_runtime.h"

namespace kiln::cuda {

class PinnedStaging {
public:
    // Transfers larger than capacity go through it in pieces.
    explicit PinnedStaging(int64_t capacity = int64_t(8) << 20) : capacity_(capacity) {}
    ~PinnedStaging();
    PinnedStaging(const PinnedStaging&) = delete;
    PinnedStaging& operator=(const PinnedStaging&) = delete;

    // Each returns once the copy is complete (src may then go; dst holds the values), after the work queued on
    // stream before it. Without pinned memory (the allocation failed), the plain pageable copy.
    void upload(void* dst, const void* src, int64_t bytes, cudaStream_t stream);
    void download(void* dst, const void* src, int64_t bytes, cudaStream_t stream);

private:
    bool ready();  // allocates the buffer on first use; false if the host refused to pin it

    int64_t capacity_;
    void* buffer_ = nullptr;
    bool failed_ = false;
};

}  // namespace kiln::cuda
