// What the plain kernels (kernels.h) share: the storage types as float and back, the host-side choice of
// the kernel instantiated for a DType, argument checks that throw before any runtime call, and the launch
// shape of grid-stride loops. Plain CUDA that HIP also compiles: names from gpu_runtime.h only.
#pragma once
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/dependent_launch.h"
#include "backends/cuda/gpu_runtime.h"
#include "core/dtype.h"
#include "kiln/error.h"

namespace kiln::cuda::detail {

// ------------------------------------------------------------------------------------------ device side

// bfloat16 as its 16 bits, converted here rather than through CUDA's __nv_bfloat16 or HIP's types, which
// differ between versions (ROCm 5.2 has neither hip_bf16.h nor CUDA's names): the same code everywhere.
struct Bf16 {
    uint16_t bits;
};

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(Bf16 v) { return __uint_as_float(uint32_t(v.bits) << 16); }

// The one rounding of a result to its storage type: to nearest, ties to even.
template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ Bf16 from_float<Bf16>(float v) {
    const uint32_t u = __float_as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) return Bf16{uint16_t((u >> 16) | 0x40)};  // NaN stays a (quiet) NaN
    return Bf16{uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};                  // to nearest, ties to even
}

// N consecutive values in one load or store: kernels that stream through memory move 2 or 4 values per
// instruction rather than one 2-byte value. The pointer must be aligned to the Vec (the caller checks).
template <class T, int N>
struct alignas(N * sizeof(T)) Vec {
    T v[N];
};
template <class T>
using Quad = Vec<T, 4>;  // 8 bytes for 16-bit types, 16 for float

template <class T>
inline bool quad_aligned(const void* p) {
    return reinterpret_cast<uintptr_t>(p) % sizeof(Quad<T>) == 0;
}
// For the widest accesses, Vec<T, 16 / sizeof(T)>: 16 bytes (a null pointer counts as aligned).
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Programmatic dependent launch (launch_dependent below; Hopper and later): a kernel so launched may be scheduled
// while the kernel before it on the stream runs its last blocks, so the boundary between the two costs less. Its
// first line must be dependent_launch_prologue(): it returns once the previous kernel is complete and its writes
// visible, and lets the next such kernel be scheduled once every block of this one has started. Elsewhere it
// does nothing.
__device__ __forceinline__ void dependent_launch_prologue() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(KILN_HIP)
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" :::);
#endif
}

// Grid-stride loops in 64-bit indices: a launch covers any count with a capped grid (blocks_for).
__device__ __forceinline__ int64_t grid_first() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_step() { return int64_t(gridDim.x) * blockDim.x; }
// Plane loops (plane_grid): planes over blockIdx.y, the elements of a plane over x. Whatever depends on
// the plane alone (a bias, a group's statistics) is computed once per plane, not per element: no 64-bit
// division per element.
__device__ __forceinline__ int64_t plane_first() { return blockIdx.y; }
__device__ __forceinline__ int64_t plane_step() { return gridDim.y; }

// -------------------------------------------------------------------------------------------- host side

// kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent launch where the device takes one
// (the kernel starts with dependent_launch_prologue()).
template <class... KernelArgs, class... Args>
void launch_dependent(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                      Args... args) {
#if !defined(KILN_HIP)
    if (!take_untriggered_library_launch() && dependent_launch_supported()) {
        cudaLaunchConfig_t config{};
        config.gridDim = grid;
        config.blockDim = block;
        config.dynamicSmemBytes = smem;
        config.stream = stream;
        cudaLaunchAttribute attribute{};
        attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attribute.val.programmaticStreamSerializationAllowed = 1;
        config.attrs = &attribute;
        config.numAttrs = 1;
        KILN_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<KernelArgs>(args)...));
        return;
    }
#endif
    kernel<<<grid, block, smem, stream>>>(static_cast<KernelArgs>(args)...);
}

// Threads per block of the elementwise kernels. Block reductions need a multiple of the warp size, which
// is 32 or 64 depending on the GPU: every block size here is a multiple of 64.
constexpr int kThreads = 256;

// Blocks for a grid-stride loop over `items`, `per_block` items per block in each round; at least 1.
// The cap keeps the grid far inside every device's limit; the loop covers what is beyond it.
inline unsigned blocks_for(int64_t items, int64_t per_block = kThreads) {
    constexpr int64_t kMaxBlocks = int64_t(1) << 16;
    return static_cast<unsigned>(std::clamp<int64_t>((items + per_block - 1) / per_block, 1, kMaxBlocks));
}

// Threads for a block that covers `items` values (a row to reduce, a plane): enough for them, in multiples
// of 64 (so of any warp size), from 64 up to `most` (itself a multiple of 64, at most 1024).
inline int threads_for(int64_t items, int most) {
    const int64_t want = std::min<int64_t>(items, most);
    return static_cast<int>(std::max<int64_t>(64, (want + 63) / 64 * 64));
}

// The launch of a plane loop over [planes, inner] (planes >= 1, inner >= 1): blockIdx.y walks the planes
// (up to the 65535 a grid's y allows, looping beyond), x covers a plane's elements; at most 2^16 blocks.
struct PlaneGrid {
    dim3 blocks;
    int threads;
};
// The blocks of a plane share its elements evenly: 320 of them take 2 blocks of 192 threads, not 2 of 256 with
// a third of the threads idle (GEGLU's rows at SD 1.5's first level).
inline PlaneGrid plane_grid(int64_t planes, int64_t inner) {
    const int64_t y = std::min<int64_t>(planes, 65535);
    const int64_t x = std::clamp<int64_t>((inner + kThreads - 1) / kThreads, 1, std::max<int64_t>(1, (int64_t(1) << 16) / y));
    const int threads = threads_for((inner + x - 1) / x, kThreads);
    return {dim3(static_cast<unsigned>(x), static_cast<unsigned>(y)), threads};
}

// The product of extents, each checked >= 0 and the product checked against int64 overflow; `op` names
// the kernels.h function in the message. Any zero extent makes an empty problem: 0, whatever the rest.
inline int64_t checked_count(const char* op, std::initializer_list<int64_t> extents) {
    std::string shape;
    for (int64_t e : extents) shape += (shape.empty() ? "" : ", ") + std::to_string(e);
    bool empty = false;
    for (int64_t e : extents) {
        require(e >= 0, ErrorKind::InvalidArgument,
                std::string("kiln::cuda::") + op + ": negative extent in (" + shape + ")");
        empty = empty || e == 0;
    }
    if (empty) return 0;
    int64_t total = 1;
    for (int64_t e : extents) {
        require(total <= INT64_MAX / e, ErrorKind::InvalidArgument,
                std::string("kiln::cuda::") + op + ": (" + shape + ") overflows 64-bit element counts");
        total *= e;
    }
    return total;
}

inline void check_pointer(const char* op, const char* name, const void* p) {
    require(p != nullptr, ErrorKind::InvalidArgument, std::string("kiln::cuda::") + op + ": " + name + " is null");
}

template <class T>
struct Type {
    using type = T;
};

// Calls f(Type<T>{}) with T the device type of `type`: float, __half or Bf16.
template <class F>
void dispatch(const char* op, DType type, F&& f) {
    switch (type) {
        case DType::F32: f(Type<float>{}); return;
        case DType::F16: f(Type<__half>{}); return;
        case DType::BF16: f(Type<Bf16>{}); return;
        default:
            fail(ErrorKind::InvalidArgument, std::string("kiln::cuda::") + op + ": " + dtype_name(type) +
                                                 " is not a storage type (F32, F16 or BF16)");
    }
}

// For kernels that only move elements: the unsigned integer of the element's width, so that copies are
// bit-exact by construction and F16 and BF16 share one instantiation.
template <class F>
void dispatch_bits(const char* op, DType type, F&& f) {
    switch (type) {
        case DType::F32: f(Type<uint32_t>{}); return;
        case DType::F16:
        case DType::BF16: f(Type<uint16_t>{}); return;
        default:
            fail(ErrorKind::InvalidArgument, std::string("kiln::cuda::") + op + ": " + dtype_name(type) +
                                                 " is not a storage type (F32, F16 or BF16)");
    }
}

}  // namespace kiln::cuda::detail
