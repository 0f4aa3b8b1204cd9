#include "backends/cuda/dependent_launch.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "backends/cuda/arch_paths.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/gpu_runtime.h"
#include "backends/cuda/on_off_setting.h"
#include "kiln/error.h"

namespace kiln::cuda::detail {

bool dependent_launch_wanted(const char* setting) {
    return on_off_setting("KILN_CUDA_PDL", setting, "dependent launches", "plain launches");
}

namespace {
thread_local bool untriggered_library_launch = false;
}  // namespace

void note_untriggered_library_launch() { untriggered_library_launch = true; }

bool take_untriggered_library_launch() {
    const bool was = untriggered_library_launch;
    untriggered_library_launch = false;
    return was;
}

bool dependent_launch_supported() {
#if defined(KILN_HIP)
    return false;
#else
    static std::mutex mutex;
    static std::map<int, bool> known;
    int device = 0;
    KILN_CUDA_CHECK(cudaGetDevice(&device));
    std::lock_guard<std::mutex> lock(mutex);
    const auto it = known.find(device);
    if (it != known.end()) return it->second;
    const bool on = dependent_launch_wanted(std::getenv("KILN_CUDA_PDL")) && device_arch_paths(device).dependent_launch;
    known[device] = on;
    return on;
#endif
}

}  // namespace kiln::cuda::detail
