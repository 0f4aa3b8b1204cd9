// Turns a failed GPU runtime call into a kiln::Error that names the call, so the library never aborts.
// Kinds: an allocation failure is OutOfMemory (recoverable: a planner may retry smaller); no device or
// too old a driver is Unsupported; a bad argument or launch configuration is InvalidArgument. ErrorKind
// has no kind for a failing device (illegal address, launch failure, ECC): those are reported as
// Unsupported too, the closest existing kind, and the message carries the runtime's own error name.
#pragma once
#include "backends/cuda/gpu_runtime.h"
#include "kiln/error.h"

namespace kiln::cuda {

ErrorKind error_kind_of(cudaError_t err);

// "cudaMalloc(&p, n) failed at attention.cu:42: cudaErrorMemoryAllocation (out of memory)".
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);

inline void check_cuda(cudaError_t err, const char* call, const char* file, int line) {
    if (err != cudaSuccess) throw_cuda_error(err, call, file, line);
}

}  // namespace kiln::cuda

#define KILN_CUDA_CHECK(call) ::kiln::cuda::check_cuda((call), #call, __FILE__, __LINE__)
