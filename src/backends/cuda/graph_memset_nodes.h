// Memset nodes of a captured graph turned into kernel nodes. cuBLASLt and cuDNN zero a 4-byte counter before
// some of their kernels (cuBLASLt's persistent products, cuDNN's fused attention); captured, each is a memset
// node, and in SD 1.5's UNet graph on the H200 a kernel started about 5 us after one, where it starts 0.5 us
// after another kernel (session 11, scripts/experiments/kernel_timeline.cpp). A kernel that writes the same bytes,
// with the same edges, costs what a small kernel costs.
#pragma once
#include "backends/cuda/gpu_runtime.h"

namespace kiln::cuda {

// Replaces every memset node of `graph` (1D or 2D, elements of 1, 2 or 4 bytes) by a kernel node writing the
// same bytes, wired to the same nodes with the same edge types. Returns how many it replaced. With
// KILN_CUDA_MEMSET_NODES=keep (for comparisons) it replaces none; any other value than "kernels" (the default) is
// InvalidArgument naming the setting.
int memset_nodes_to_kernels(cudaGraph_t graph);

// KILN_CUDA_MEMSET_NODES's value (null: unset): unset, "" or "kernels" rewrite memsets, "keep" keeps them; anything
// else is InvalidArgument naming it.
bool memset_nodes_kept(const char* setting);

}  // namespace kiln::cuda
