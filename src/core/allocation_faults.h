// KILN_FAIL_ALLOCATION_AT=[DEVICE:]N: the Nth counted allocation throws OutOfMemory, before anything is allocated,
// to test the failure paths (docs/MEMORY.md). Counted: host tensors (Tensor(Shape), "cpu") and GPU allocators'
// allocations (VulkanMemory::allocate, "vulkan:0"; CudaAllocator::allocate, "cuda:0"); with DEVICE, only those whose name starts with it.
#pragma once
#include <cstdint>
#include <string>

namespace kiln {

void count_allocation(const std::string& where, int64_t bytes);

// Tests, in one process: from now on the nth counted allocation whose name starts with `device` fails, counting
// from zero again (n = 0: none), in place of what KILN_FAIL_ALLOCATION_AT said; and how many such allocations
// were counted since. Call it while nothing allocates on other threads.
void fail_allocation_at(const std::string& device, int64_t n);
int64_t allocations_counted();

}  // namespace kiln
