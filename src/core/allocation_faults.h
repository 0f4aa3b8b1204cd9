// KILN_FAIL_ALLOCATION_AT=[DEVICE:]N: the Nth counted allocation throws OutOfMemory, before anything is allocated,
// to test the failure paths (docs/MEMORY.md). Counted: host tensors (Tensor(Shape), "cpu") and GPU allocators'
// allocations (VulkanMemory::allocate, "vulkan:0"; CudaAllocator::allocate, "cuda:0"); with DEVICE, only those whose name starts with it.
#pragma once
#include <cstdint>
#include <string>

namespace kiln {

void count_allocation(const std::string& where, int64_t bytes);

}  // namespace kiln
