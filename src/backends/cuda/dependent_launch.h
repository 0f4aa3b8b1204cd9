// Whether kiln's plain kernels go out as programmatic dependent launches (kernel_common.cuh's launch_dependent):
// on devices of compute capability 9.0 or later (arch_paths.h, KILN_CUDA_ARCH included), unless KILN_CUDA_PDL=0 (for comparisons).
#pragma once

namespace kiln::cuda::detail {

// For the current device; asked once per device.
bool dependent_launch_supported();

// A library kernel that does not let its dependents start early (cuBLASLt's products, cuDNN's fused attention)
// was the last launch on this thread: the next kiln kernel goes out as a plain launch. After such a kernel a
// dependent launch started about 1 us after it ended, a plain one 0.45 us (session 11's kernel timeline of SD
// 1.5's UNet graph on the H200); after kiln's kernels and cuDNN's convolutions, which do let it start early, the
// dependent launch overlaps. launch_dependent() clears it.
void note_untriggered_library_launch();
bool take_untriggered_library_launch();
// KILN_CUDA_PDL's value (null: unset): unset, "" or "1" want dependent launches, "0" does not; anything else is
// InvalidArgument naming it.
bool dependent_launch_wanted(const char* setting);

}  // namespace kiln::cuda::detail
