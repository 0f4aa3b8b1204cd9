#include "pipeline/compiled_backends.h"

#include <mutex>

#include "core/backend.h"
#if KILN_HAS_CUDA
#include "backends/cuda/cuda_backend.h"
#endif
#if KILN_HAS_VULKAN
#include "backends/vulkan/vulkan_backend.h"
#endif

namespace kiln {

void register_compiled_backends() {
    static std::once_flag once;
    std::call_once(once, [] {
#if KILN_HAS_CUDA
        register_backend_factory(DeviceKind::Cuda, cuda::cuda_backend_factory());
#endif
#if KILN_HAS_VULKAN
        register_backend_factory(DeviceKind::Vulkan, vulkan::vulkan_backend_factory());
#endif
    });
}

}  // namespace kiln
