// Registers the GPU backends this build has (CUDA where nvcc was found, Vulkan where libvulkan-dev and glslc were) with the registry in core/backend.h.
// Programs call it once before naming a device; calling it again does nothing.
#pragma once

namespace kiln {

void register_compiled_backends();

}  // namespace kiln
