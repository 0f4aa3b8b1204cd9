// The GPU backends as plugins: libkiln-cuda.so and libkiln-vulkan.so, next to the kiln program (or in
// $KILN_PLUGIN_DIR), loaded the first time a device of their kind is listed or asked for. A run that never
// names a GPU (--device cpu, --help, `kiln info MODEL`) loads neither, and so neither the CUDA libraries;
// a plugin that cannot be loaded makes its devices unavailable, with the loader's reason, not a crash.
#pragma once
#include <string>

namespace kiln {

// Registers (core/backend.h) a factory for each GPU backend this build made a plugin of, which loads the
// plugin on first use. Loads nothing itself. Programs call it once before naming a device; calling it
// again does nothing.
void register_backend_plugins();

// The folder the plugins are looked for in: $KILN_PLUGIN_DIR when set, else the running program's folder.
// Empty when neither is known (no /proc): the plugins are then reported missing.
std::string backend_plugin_dir();

}  // namespace kiln
