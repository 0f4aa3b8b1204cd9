// The backend's paths a GPU can take, by its compute capability (major * 10 + minor: 75 Turing, 80 A100, 86 RTX 30,
// 89 RTX 40, 90 H100), and KILN_CUDA_ARCH, which makes the backend choose as if the capability were lower (to
// run older GPUs' paths on a newer one). It changes the host's choices only: the device still runs the kernels
// built for its own architecture, and cuBLASLt and cuDNN still pick theirs.
#pragma once
#include <string>

namespace kiln::cuda {

constexpr int kLowestCapability = 75;  // the oldest the build targets (CMakeLists.txt) and the backend accepts

struct ArchPaths {
    int capability = 0;             // the one the choices follow
    bool flash_attention = false;   // kiln's flash kernel: mma.sync m16n8k16, cp.async (8.0)
    bool cudnn_attention = false;   // cuDNN's fused attention (8.0)
    bool bf16 = false;              // bfloat16 tensor cores (8.0)
    bool tf32 = false;              // TF32 products for float32 (8.0)
    bool int8_mma = false;          // int8 mma.sync m16n8k32 (8.0)
    bool fp8_mma = false;           // e4m3 / e5m2 tensor cores (8.9)
    bool dependent_launch = false;  // programmatic dependent launch, griddepcontrol (9.0)
    bool tma = false;               // the tensor memory accelerator (9.0)
    int max_shared_per_block = 0;   // bytes of shared memory a block may opt in to
};

// The paths of a capability (no runtime call).
ArchPaths arch_paths(int capability);

// The capability to choose by on a device of capability `real`, given KILN_CUDA_ARCH's value (null or empty:
// unset): "75", "7.5" or "sm_75" ("100", "10.0"). InvalidArgument naming it for anything else, a capability
// below kLowestCapability or above `real`.
int chosen_capability(int real, const char* setting);

std::string capability_name(int capability);  // "7.5"

// Device `device`'s paths (under KILN_CUDA_ARCH, the shared memory capped as that architecture's), asked once per
// device. Unsupported below kLowestCapability; HIP builds: none.
const ArchPaths& device_arch_paths(int device);

}  // namespace kiln::cuda
