#include "pipeline/backend_plugins.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <vector>

#include "core/backend.h"
#include "core/backend_plugin.h"
#include "kiln/error.h"

#define KILN_STRINGIFY_(x) #x
#define KILN_STRINGIFY(x) KILN_STRINGIFY_(x)

namespace kiln {

namespace {

struct Plugin {
    DeviceKind kind;
    const char* name;  // "cuda": the file is libkiln-cuda.so, and its reasons start "cuda: "
    // A library the backend cannot work without, checked before the plugin is loaded. For CUDA, the driver:
    // without it there is no NVIDIA GPU to use, and loading the plugin would only pay for the CUDA
    // libraries (0.4 s and 200 MiB) to learn that.
    const char* needs;
    const char* needs_what;
};

// The plugins this build made (CMakeLists.txt defines which).
const std::vector<Plugin>& built_plugins() {
    static const std::vector<Plugin> all{
#if KILN_BUILT_CUDA_PLUGIN
        {DeviceKind::Cuda, "cuda", "libcuda.so.1", "no NVIDIA driver"},
#endif
#if KILN_BUILT_VULKAN_PLUGIN
        {DeviceKind::Vulkan, "vulkan", nullptr, nullptr},  // the backend loads libvulkan.so.1 and says if it is missing
#endif
    };
    return all;
}

// A plugin's factory once loaded, or why it could not be. Kept for the process: a plugin is never unloaded,
// since its code runs until exit (the backends' destructors included).
struct Loaded {
    BackendFactory factory;  // empty when loading failed
    std::string why;         // "cuda: ..." when it did
};

Loaded load(const Plugin& p) {
    const std::string kind = p.name;
    if (p.needs && !dlopen(p.needs, RTLD_LAZY | RTLD_LOCAL))  // kept open: the plugin would open it again
        return {{}, kind + ": " + p.needs_what + " (" + dlerror() + ")"};
    const std::string dir = backend_plugin_dir();
    if (dir.empty()) return {{}, kind + ": cannot tell the kiln program's folder (no /proc); set KILN_PLUGIN_DIR"};
    const std::string path = dir + "/libkiln-" + kind + ".so";
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
        return {{}, kind + ": no plugin " + path + " (kiln looks next to its program, or in $KILN_PLUGIN_DIR)"};
    // RTLD_NOW: a library the plugin needs that is missing (libcudart.so.13, ...) fails here, by name, not
    // at the first call into it. RTLD_LOCAL: the two plugins' own symbols stay apart.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) return {{}, kind + ": cannot load " + path + ": " + dlerror()};
    const char* entry_name = KILN_STRINGIFY(KILN_BACKEND_PLUGIN_ENTRY);
    auto entry = reinterpret_cast<void (*)(BackendFactory*)>(dlsym(handle, entry_name));
    if (!entry) {
        dlclose(handle);
        return {{}, kind + ": " + path + " is not a backend plugin of this kiln (it has no " + entry_name + ")"};
    }
    Loaded l;
    entry(&l.factory);
    return l;
}

// The plugin of `p`, loaded on the first call.
const Loaded& loaded(const Plugin& p) {
    static std::mutex mutex;
    static std::map<DeviceKind, Loaded> all;
    std::lock_guard lock(mutex);
    auto it = all.find(p.kind);
    if (it == all.end()) it = all.emplace(p.kind, load(p)).first;
    return it->second;
}

// Stands in for the plugin's factory until it is needed, then passes every call on.
BackendFactory on_demand(const Plugin& p) {
    BackendFactory f;
    f.list = [&p](std::string* why) -> std::vector<DeviceDescription> {
        const Loaded& l = loaded(p);
        if (l.factory.list) return l.factory.list(why);
        if (why) *why = l.why;
        return {};
    };
    f.create = [&p](int index) -> std::unique_ptr<Backend> {
        const Loaded& l = loaded(p);
        require(bool(l.factory.create), ErrorKind::Unsupported, l.why);
        return l.factory.create(index);
    };
    return f;
}

}  // namespace

std::string backend_plugin_dir() {
    if (const char* env = std::getenv("KILN_PLUGIN_DIR"); env && *env) return env;
    std::error_code ec;
    const std::filesystem::path program = std::filesystem::read_symlink("/proc/self/exe", ec);
    return ec ? std::string() : program.parent_path().string();
}

void register_backend_plugins() {
    static std::once_flag once;
    std::call_once(once, [] {
        for (const Plugin& p : built_plugins()) register_backend_factory(p.kind, on_demand(p));
    });
}

}  // namespace kiln
