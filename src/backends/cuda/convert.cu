// convert: one storage type to another through float. Widening to float is exact, so each element is
// rounded once, to nearest even, by from_float; NaN stays NaN and overflow becomes infinity.
#include "backends/cuda/kernel_common.cuh"
#include "backends/cuda/kernels.h"

namespace kiln::cuda {

namespace {

template <class S, class D>
__global__ void convert_kernel(const S* src, D* dst, int64_t n) {
    for (int64_t i = detail::grid_first(); i < n; i += detail::grid_step())
        dst[i] = detail::from_float<D>(detail::to_float(src[i]));
}

}  // namespace

void convert(const void* src, DType src_type, void* dst, DType dst_type, int64_t n, cudaStream_t stream) {
    if (is_block_quantized(src_type)) return dequantize(src, src_type, dst, dst_type, n, stream);
    const int64_t count = detail::checked_count("convert", {n});
    // Types first, so that a bad one is reported even for an empty tensor.
    detail::dispatch("convert", src_type, [](auto) {});
    detail::dispatch("convert", dst_type, [](auto) {});
    if (count == 0) return;
    detail::check_pointer("convert", "src", src);
    detail::check_pointer("convert", "dst", dst);
    if (src_type == dst_type) {  // a copy (nothing at all in place)
        if (src != dst)
            KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(count) * dtype_size(src_type), cudaMemcpyDeviceToDevice,
                                            stream));
        return;
    }
    detail::dispatch("convert", src_type, [&](auto s) {
        using S = typename decltype(s)::type;
        detail::dispatch("convert", dst_type, [&](auto d) {
            using D = typename decltype(d)::type;
            convert_kernel<S, D><<<detail::blocks_for(count), detail::kThreads, 0, stream>>>(
                static_cast<const S*>(src), static_cast<D*>(dst), count);
        });
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kiln::cuda
