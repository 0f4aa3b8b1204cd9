// The GPU tests link the backends this build has statically (they reach inside them: vulkan_test.cpp) and
// register them directly, rather than through the plugins the kiln program loads (pipeline/backend_plugins.h;
// the CLI tests cover those).
#pragma once
#include <mutex>

#include "core/backend.h"
#if KILN_HAS_CUDA
#include "backends/cuda/cuda_backend.h"
#endif
#if KILN_HAS_VULKAN
#include "backends/vulkan/vulkan_backend.h"
#endif

namespace kiln::test {

inline void register_linked_backends() {
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

}  // namespace kiln::test
