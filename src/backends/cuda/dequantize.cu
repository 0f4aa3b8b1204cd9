// dequantize: block-format weights (Q8_0 ... Q6_K, Q2_K, Q3_K) widened to float32, float16 or bfloat16 on the device, by the
// decoders the host uses (quant/block_formats.h, quant/k_quants.h): one thread decodes 32 values (a block of the
// 32-value formats, a part of a k-quant's 256), each value computed in float32 exactly as on the CPU and rounded
// once to the destination type. This file is compiled with --fmad=false (CMakeLists.txt; HIP: the pragma below),
// so that q4_1's q * d + m and the k-quants' step * q - off are two roundings, as the host computes them: F32
// results are the host's bit for bit. The transient weights of the products come from here (ops/device_weight.h).
#include <string>
#include <type_traits>

#if defined(KILN_HIP)
// hipcc (clang) contracts by default, and takes no --fmad: the pragma, before the decoders are included.
#pragma clang fp contract(off)
#endif

#include "backends/cuda/kernel_common.cuh"
#include "backends/cuda/kernels.h"
#include "quant/k_quants.h"

namespace kiln::cuda {

namespace {

template <DType F>
__device__ __forceinline__ void decode_part(const uint8_t* blocks, int64_t part, float* v) {
    using namespace kiln::quant;
    switch (F) {
        case DType::Q8_0: return dequantize_q8_0(blocks + part * kQ8_0Bytes, v);
        case DType::Q4_0: return dequantize_q4_0(blocks + part * kQ4_0Bytes, v);
        case DType::Q4_1: return dequantize_q4_1(blocks + part * kQ4_1Bytes, v);
        case DType::Q5_0: return dequantize_q5_0(blocks + part * kQ5_0Bytes, v);
        case DType::Q5_1: return dequantize_q5_1(blocks + part * kQ5_1Bytes, v);
        case DType::Q4_K: return dequantize_q4_K_part(blocks + (part / 8) * kQ4_KBytes, int(part % 8), v);
        case DType::Q5_K: return dequantize_q5_K_part(blocks + (part / 8) * kQ5_KBytes, int(part % 8), v);
        case DType::Q6_K: return dequantize_q6_K_part(blocks + (part / 8) * kQ6_KBytes, int(part % 8), v);
        case DType::Q2_K: return dequantize_q2_K_part(blocks + (part / 8) * kQ2_KBytes, int(part % 8), v);
        case DType::Q3_K: return dequantize_q3_K_part(blocks + (part / 8) * kQ3_KBytes, int(part % 8), v);
        default: return;
    }
}

// Each thread decodes one part into shared memory, then the block stores its parts' values in order, so that
// neighbouring threads write neighbouring values (a thread writing its own 32 would scatter each store
// instruction over 32 lines). Rows of 33 floats keep the decoding threads' writes off each other's banks.
constexpr int kPartsPerBlock = 128;

template <DType F, class D>
__global__ void __launch_bounds__(kPartsPerBlock) dequantize_kernel(const uint8_t* blocks, D* dst, int64_t parts) {
    __shared__ float values[kPartsPerBlock * 33];
    // The loop's trip count is the same for every thread of the block (it depends on blockIdx only), so all
    // of them reach each barrier.
    for (int64_t first = int64_t(blockIdx.x) * kPartsPerBlock; first < parts;
         first += int64_t(gridDim.x) * kPartsPerBlock) {
        const int64_t p = first + threadIdx.x;
        if (p < parts) {
            float v[32];
            decode_part<F>(blocks, p, v);
#pragma unroll
            for (int i = 0; i < 32; ++i) values[threadIdx.x * 33 + i] = v[i];
        }
        __syncthreads();
        const int count = int(parts - first < kPartsPerBlock ? parts - first : kPartsPerBlock) * 32;
        D* out = dst + first * 32;
        for (int e = threadIdx.x; e < count; e += kPartsPerBlock)
            out[e] = detail::from_float<D>(values[(e / 32) * 33 + e % 32]);
        __syncthreads();
    }
}


// A convolution filter [cout, cin, taps] widened straight into the channels-last order [cout, taps, cin] that
// the NHWC convolutions read (cuda_device_ops.cpp, channels_last_filter), so that a block-format filter's
// transient needs no transpose after it. A CUDA block takes one output channel's run of kChannelRun input
// channels: its parts (whole, since cin is a multiple of 32) are decoded into shared memory in their stored
// order, then written out tap by tap, so neighbouring threads store neighbouring values.
constexpr int kChannelRun = 256;
constexpr int kKrscThreads = 128;

template <DType F, class D>
__global__ void __launch_bounds__(kKrscThreads)
    dequantize_krsc_kernel(const uint8_t* blocks, D* dst, int64_t cin, int64_t taps) {
    extern __shared__ float run[];  // kChannelRun * taps values: [channel][tap]
    const int64_t o = blockIdx.y, c0 = int64_t(blockIdx.x) * kChannelRun;
    const int64_t channels = cin - c0 < kChannelRun ? cin - c0 : kChannelRun;
    const int64_t first_part = (o * cin + c0) * taps / 32, parts = channels * taps / 32;
    for (int64_t p = threadIdx.x; p < parts; p += kKrscThreads) {
        float v[32];
        decode_part<F>(blocks, first_part + p, v);
#pragma unroll
        for (int i = 0; i < 32; ++i) run[p * 32 + i] = v[i];
    }
    __syncthreads();
    D* out = dst + o * taps * cin + c0;
    for (int64_t e = threadIdx.x; e < channels * taps; e += kKrscThreads) {
        const int64_t t = e / channels, c = e % channels;
        out[t * cin + c] = detail::from_float<D>(run[c * taps + t]);
    }
}

template <class F>
void dispatch_format(DType type, F&& f) {
    switch (type) {
        case DType::Q8_0: return f(std::integral_constant<DType, DType::Q8_0>{});
        case DType::Q4_0: return f(std::integral_constant<DType, DType::Q4_0>{});
        case DType::Q4_1: return f(std::integral_constant<DType, DType::Q4_1>{});
        case DType::Q5_0: return f(std::integral_constant<DType, DType::Q5_0>{});
        case DType::Q5_1: return f(std::integral_constant<DType, DType::Q5_1>{});
        case DType::Q4_K: return f(std::integral_constant<DType, DType::Q4_K>{});
        case DType::Q5_K: return f(std::integral_constant<DType, DType::Q5_K>{});
        case DType::Q6_K: return f(std::integral_constant<DType, DType::Q6_K>{});
        case DType::Q2_K: return f(std::integral_constant<DType, DType::Q2_K>{});
        case DType::Q3_K: return f(std::integral_constant<DType, DType::Q3_K>{});
        default:
            fail(ErrorKind::InvalidArgument,
                 std::string("kiln::cuda::dequantize: ") + dtype_name(type) + " is not a block format");
    }
}

}  // namespace

void dequantize(const void* src, DType src_type, void* dst, DType dst_type, int64_t n, cudaStream_t stream) {
    dispatch_format(src_type, [](auto) {});
    detail::dispatch("dequantize", dst_type, [](auto) {});
    const int64_t count = detail::checked_count("dequantize", {n});
    require(count % dtype_block_values(src_type) == 0, ErrorKind::InvalidArgument,
            "kiln::cuda::dequantize: " + std::to_string(count) + " values are not whole " + dtype_name(src_type) +
                " blocks");
    if (count == 0) return;
    detail::check_pointer("dequantize", "src", src);
    detail::check_pointer("dequantize", "dst", dst);
    const int64_t parts = count / 32;
    dispatch_format(src_type, [&](auto f) {
        detail::dispatch("dequantize", dst_type, [&](auto d) {
            using D = typename decltype(d)::type;
            dequantize_kernel<decltype(f)::value, D>
                <<<detail::blocks_for(parts, kPartsPerBlock), kPartsPerBlock, 0, stream>>>(
                    static_cast<const uint8_t*>(src), static_cast<D*>(dst), parts);
        });
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

bool dequantize_krsc_supported(int64_t cin, int64_t taps) {
    return cin > 0 && cin % 32 == 0 && taps >= 1 && taps <= kMaxKrscTaps;
}

void dequantize_krsc(const void* src, DType src_type, void* dst, DType dst_type, int64_t cout, int64_t cin,
                     int64_t taps, cudaStream_t stream) {
    dispatch_format(src_type, [](auto) {});
    detail::dispatch("dequantize_krsc", dst_type, [](auto) {});
    detail::checked_count("dequantize_krsc", {cout, cin, taps});
    require(dequantize_krsc_supported(cin, taps) && cout <= 65535 && (cin * taps) % dtype_block_values(src_type) == 0,
            ErrorKind::InvalidArgument,
            "kiln::cuda::dequantize_krsc: a filter of " + std::to_string(cout) + " x " + std::to_string(cin) + " x " +
                std::to_string(taps) + " does not split into whole " + dtype_name(src_type) + " blocks per channel run");
    if (cout == 0) return;
    detail::check_pointer("dequantize_krsc", "src", src);
    detail::check_pointer("dequantize_krsc", "dst", dst);
    const dim3 grid(unsigned((cin + kChannelRun - 1) / kChannelRun), unsigned(cout));
    const size_t shared = size_t(kChannelRun) * size_t(taps) * sizeof(float);
    dispatch_format(src_type, [&](auto f) {
        detail::dispatch("dequantize_krsc", dst_type, [&](auto d) {
            using D = typename decltype(d)::type;
            dequantize_krsc_kernel<decltype(f)::value, D><<<grid, kKrscThreads, shared, stream>>>(
                static_cast<const uint8_t*>(src), static_cast<D*>(dst), cin, taps);
        });
    });
    KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kiln::cuda
