// libkiln-vulkan.so's entry point: the Vulkan backend's factory (core/backend_plugin.h).
#include "backends/vulkan/vulkan_backend.h"
#include "core/backend_plugin.h"

extern "C" void KILN_BACKEND_PLUGIN_ENTRY(kiln::BackendFactory* factory) {
    *factory = kiln::vulkan::vulkan_backend_factory();
}
