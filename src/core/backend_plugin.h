// The one symbol a GPU backend plugin (libkiln-cuda.so, libkiln-vulkan.so: src/backends/plugins/) exports,
// and pipeline/backend_plugins.cpp looks up after loading it: it fills in the backend's factory.
// A plugin uses the kiln program's own core (its classes, memory accounting, registries) rather than a copy,
// so it only fits the kiln it was built with; the version in the symbol's name changes whenever this
// contract does, and a plugin without the current name is refused by name instead of crashing.
#pragma once
#include "core/backend.h"

#define KILN_BACKEND_PLUGIN_ENTRY kiln_backend_plugin_v2

extern "C" void KILN_BACKEND_PLUGIN_ENTRY(kiln::BackendFactory* factory);
