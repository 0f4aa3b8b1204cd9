// A weight as a device's products take it. A block-format weight (Q8_0 ... Q6_K) stays blocks in device memory
// where its backend supports() the format (core/tensor.h); right before a product it is dequantized on the
// device (DeviceOps::widen_weight: the backend's convert kernel, or CUDA's straight into the channels-last
// order of its convolutions) into a transient tensor in the activations' dtype, freed when the
// product has been queued. So at most one layer's dequantized copy exists at a time, and inside a recorded call
// (a CUDA graph, a Vulkan command buffer) the copy is the recording's own scratch, as any op's output is.
// Any other weight, and a block weight whose backend's products read that format themselves
// (DeviceOps::reads_blocks: Vulkan's q8_0 with KILN_VULKAN_Q8=fused), is passed through untouched.
#pragma once
#include "core/memory.h"
#include "core/tensor.h"
#include "ops/device_ops.h"

namespace kiln::ops {

class DeviceWeight {
public:
    // x: the product's input, whose dtype the dequantized weight takes.
    DeviceWeight(const Tensor& x, const Tensor& w) : w_(&w) {
        if (!w.on_device() || !is_block_quantized(w.dtype()) || w.backend().ops().reads_blocks(w.dtype())) return;
        MemoryCategoryScope scratch(MemoryCategory::Workspace);
        widened_ = w.backend().ops().widen_weight(w, x.dtype());
        w_ = &widened_;
    }
    DeviceWeight(const DeviceWeight&) = delete;
    DeviceWeight& operator=(const DeviceWeight&) = delete;
    const Tensor& operator*() const { return *w_; }

private:
    const Tensor* w_;
    Tensor widened_;
};

}  // namespace kiln::ops
