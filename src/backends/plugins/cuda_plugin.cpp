// libkiln-cuda.so's entry point: the CUDA backend's factory (core/backend_plugin.h).
#include "backends/cuda/cuda_backend.h"
#include "core/backend_plugin.h"

extern "C" void KILN_BACKEND_PLUGIN_ENTRY(kiln::BackendFactory* factory) {
    *factory = kiln::cuda::cuda_backend_factory();
}
