// Block-format weights dequantized on a second stream, while the product before theirs runs (docs/QUANT.md).
// A product's transient weight depends only on the weight, not on the activations: its dequantization can start
// as soon as the product before the previous one has read the buffer it will fill. So each transient goes into
// one of two buffers in turn, written on a side stream that waits for the main stream as it was when the
// previous transient was asked for (the point after the product before it was queued), and the main stream waits
// for the side stream before the product. Inside a CUDA graph capture the events become edges, so a recorded
// UNet call overlaps each dequantization with the product before it; eagerly, the two streams do the same.
// Without this the dequantizing kernels sat between the products: 2.2 ms of an 8.1 ms q8_0 SD 1.5 UNet call on
// an H200 (fp16: 5.9).
// The buffers live as long as the backend: graphs hold their addresses. One grown during a capture is kept (a
// graph may name the smaller one); eagerly, the smaller one is freed.
#pragma once
#include <array>
#include <memory>
#include <vector>

#include "backends/cuda/gpu_runtime.h"
#include "core/tensor.h"

namespace kiln::cuda {

class CudaBackend;

class DequantizeAhead {
public:
    explicit DequantizeAhead(CudaBackend& backend);
    ~DequantizeAhead();
    DequantizeAhead(const DequantizeAhead&) = delete;
    DequantizeAhead& operator=(const DequantizeAhead&) = delete;

    // w's values in `dtype`, laid out [cout, taps, cin] when channels_last (a filter for the NHWC convolutions;
    // the backend marks it), else as stored; the main stream waits for them. The tensor shares a buffer that
    // the next call but one overwrites: use it for one product.
    Tensor widen(const Tensor& w, DType dtype, bool channels_last);
    // The next widen waits for everything queued on the main stream so far: after anything wrote memory a
    // block weight may live in (uploads, copies), and where a capture begins or ends.
    void restart() { have_point_ = false; }

private:
    CudaBackend& backend_;
    cudaStream_t side_ = nullptr;
    cudaEvent_t point_ = nullptr, done_ = nullptr;
    bool have_point_ = false;
    unsigned long long point_capture_ = 0;  // the capture point_ was recorded in; 0: none
    std::array<std::shared_ptr<DeviceBuffer>, 2> buffers_;
    std::vector<std::shared_ptr<DeviceBuffer>> retired_;  // grown out of during a capture
    int next_ = 0;
};

// w's values into `wide` (a tensor of w's shape in the transient's dtype) on `stream`, in channels-last order
// [cout, taps, cin] and marked so when channels_last, else as stored (a mark left there goes): the one way a
// transient is written, ahead or in line.
void write_widened(CudaBackend& backend, const Tensor& w, Tensor& wide, bool channels_last, cudaStream_t stream);

// KILN_CUDA_DEQUANT_AHEAD's value (null: unset): unset, "" or "1" dequantize ahead, "0" in line before each
// product (for comparisons); anything else is InvalidArgument naming it.
bool dequantize_ahead_wanted(const char* setting);

}  // namespace kiln::cuda
