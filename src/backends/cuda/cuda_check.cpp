#include "backends/cuda/cuda_check.h"

#include <string>

namespace kiln::cuda {

ErrorKind error_kind_of(cudaError_t err) {
    switch (err) {
        case cudaErrorMemoryAllocation: return ErrorKind::OutOfMemory;
        case cudaErrorInvalidValue:
        case cudaErrorInvalidConfiguration: return ErrorKind::InvalidArgument;
        default: return ErrorKind::Unsupported;
    }
}

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
    // Reset the runtime's last error, or a caught (recoverable) failure would resurface at the next
    // launch check; sticky errors stay, as they must.
    (void)cudaGetLastError();
    std::string where = file;
    const size_t slash = where.find_last_of('/');
    if (slash != std::string::npos) where = where.substr(slash + 1);
    throw Error(error_kind_of(err), std::string(call) + " failed at " + where + ":" + std::to_string(line) + ": " +
                                        cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

}  // namespace kiln::cuda
