#include "backends/cuda/dequantize_ahead.h"

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/on_off_setting.h"
#include "kiln/error.h"

namespace kiln::cuda {

bool dequantize_ahead_wanted(const char* setting) {
    return detail::on_off_setting("KILN_CUDA_DEQUANT_AHEAD", setting, "dequantizes weights ahead",
                                  "before each product");
}

DequantizeAhead::DequantizeAhead(CudaBackend& backend) : backend_(backend) {
    KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&point_, cudaEventDisableTiming));
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
}

DequantizeAhead::~DequantizeAhead() {
    if (side_) (void)cudaStreamSynchronize(side_);
    if (point_) (void)cudaEventDestroy(point_);
    if (done_) (void)cudaEventDestroy(done_);
    if (side_) (void)cudaStreamDestroy(side_);
}

Tensor DequantizeAhead::widen(const Tensor& w, DType dtype, bool channels_last) {
    cudaStream_t main = backend_.stream();
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long capture = 0;
    KILN_CUDA_CHECK(cudaStreamGetCaptureInfo(main, &status, &capture));
    if (status != cudaStreamCaptureStatusActive) capture = 0;

    const int64_t bytes = dtype_storage_bytes(dtype, w.numel());
    std::shared_ptr<DeviceBuffer>& buffer = buffers_[size_t(next_)];
    next_ ^= 1;
    const bool fresh = !buffer || buffer->bytes() < bytes;
    if (fresh) {
        if (buffer && capture) retired_.push_back(buffer);  // the graph being captured may name it
        buffer.reset();
        buffer = backend_.lasting_buffer(bytes);
    }
    // Start from now where the point is another capture's (or from outside this one), which cannot be waited for
    // here, and for a buffer just allocated: the caching allocator hands out memory in the main stream's order,
    // so work queued after the point may still read what it held.
    if (!have_point_ || point_capture_ != capture || fresh) KILN_CUDA_CHECK(cudaEventRecord(point_, main));
    Tensor wide = Tensor::on_buffer(buffer, w.shape(), dtype);
    // The buffer was last read by the product before the previous one, which point_ follows.
    KILN_CUDA_CHECK(cudaStreamWaitEvent(side_, point_, 0));
    write_widened(backend_, w, wide, channels_last, side_);
    KILN_CUDA_CHECK(cudaEventRecord(done_, side_));
    KILN_CUDA_CHECK(cudaStreamWaitEvent(main, done_, 0));
    // The next transient may be written once this product's predecessor is done: the main stream as it is now.
    KILN_CUDA_CHECK(cudaEventRecord(point_, main));
    have_point_ = true;
    point_capture_ = capture;
    return wide;
}

void write_widened(CudaBackend& backend, const Tensor& w, Tensor& wide, bool channels_last, cudaStream_t stream) {
    if (channels_last) {
        const int64_t cout = w.dim(0), cin = w.dim(1), taps = w.dim(2) * w.dim(3);
        dequantize_krsc(w.device_data(), w.dtype(), wide.device_data(), wide.dtype(), cout, cin, taps, stream);
        backend.mark_channels_last(wide.device_data(), {cout, cin, taps, wide.dtype()});
    } else {
        dequantize(w.device_data(), w.dtype(), wide.device_data(), wide.dtype(), w.numel(), stream);
        backend.forget_channels_last(wide.device_data());
    }
}

}  // namespace kiln::cuda
