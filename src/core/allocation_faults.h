// Injected allocation failures, to test that every out-of-memory path ends cleanly (issue 21). With
// KILN_FAIL_ALLOCATION_AT=[DEVICE:]N the Nth counted allocation of the process throws OutOfMemory, as a real failure
// would, before anything is allocated. Counted are host tensors (Tensor(Shape), as "cpu") and each allocation a GPU
// backend's allocator hands out (VulkanMemory::allocate, as "vulkan:0"); with a DEVICE prefix ("vulkan", "cpu")
// only the allocations whose device name starts with it count. Unset (or 0), the check is one atomic load.
#pragma once
#include <cstdint>
#include <string>

namespace kiln {

// Counts one allocation of `bytes` on `where` ("cpu", "vulkan:0"); throws OutOfMemory if it is the one to fail.
void count_allocation(const std::string& where, int64_t bytes);

// For tests in one process: the Nth allocation from now on a device whose name starts with `device` ("": any)
// fails (n = 0: none), overriding the environment.
void fail_allocation_at(int64_t n, const std::string& device = "");

}  // namespace kiln
