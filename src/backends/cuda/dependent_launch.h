// Whether kiln's plain kernels go out as programmatic dependent launches (kernel_common.cuh's launch_dependent):
// on devices of compute capability 9.0 or later, unless KILN_CUDA_PDL=0 (for comparisons).
#pragma once

namespace kiln::cuda::detail {

// For the current device; asked once per device.
bool dependent_launch_supported();
// KILN_CUDA_PDL's value (null: unset): unset, "" or "1" want dependent launches, "0" does not; anything else is
// InvalidArgument naming it.
bool dependent_launch_wanted(const char* setting);

}  // namespace kiln::cuda::detail
