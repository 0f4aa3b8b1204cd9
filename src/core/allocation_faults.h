// Injected allocation failures, to test that every out-of-memory path ends cleanly (issue 21): with
// KILN_FAIL_ALLOCATION_AT=N the Nth tensor allocation of the process (host tensors made by Tensor(Shape), and
// each allocation a GPU backend's allocator hands out: VulkanMemory::allocate) throws OutOfMemory, as a real
// failure would, before anything is allocated. Unset (or 0), the check is one relaxed atomic load.
#pragma once
#include <cstdint>
#include <string>

namespace kiln {

// Counts one allocation of `bytes` on `where` ("cpu", "vulkan:0"); throws OutOfMemory if it is the one to fail.
void count_allocation(const std::string& where, int64_t bytes);

// For tests in one process: the Nth allocation from now fails (0: none), overriding the environment.
void fail_allocation_at(int64_t n);

}  // namespace kiln
