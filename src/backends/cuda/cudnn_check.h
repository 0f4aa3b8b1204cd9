// What the two cuDNN convolution routes share (cudnn_conv.cpp: the legacy API on NCHW; cudnn_graph_conv.cpp:
// the graph API on NHWC): a failed call as a kiln::Error naming it, and kiln's storage dtypes as cuDNN's.
// Included only where CMake found cuDNN (KILN_HAS_CUDNN).
#pragma once
#include <cudnn.h>

#include <string>

#include "core/dtype.h"
#include "kiln/error.h"

namespace kiln::cuda {

// Allocation failures are OutOfMemory; everything else (no engine for a shape included) is Unsupported.
inline void cudnn_check(cudnnStatus_t s, const char* call) {
    if (s != CUDNN_STATUS_SUCCESS)
        throw Error(s == CUDNN_STATUS_ALLOC_FAILED ? ErrorKind::OutOfMemory : ErrorKind::Unsupported,
                    std::string(call) + " failed: " + cudnnGetErrorString(s));
}
#define KILN_CUDNN_CHECK(call) ::kiln::cuda::cudnn_check((call), #call)

inline cudnnDataType_t cudnn_type(DType t) {
    return t == DType::F16 ? CUDNN_DATA_HALF : t == DType::BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

}  // namespace kiln::cuda
