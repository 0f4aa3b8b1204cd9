#include "backends/cuda/graph_memset_nodes.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "kiln/error.h"

namespace kiln::cuda {

namespace {

// cudaMemsetParams's fill: height rows of width elements of element_size bytes, rows pitch bytes apart.
__global__ void fill_kernel(unsigned char* dst, unsigned value, unsigned element_size, size_t width, size_t height,
                            size_t pitch) {
    const size_t count = width * height;
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
        unsigned char* p = dst + (i / width) * pitch + (i % width) * element_size;
        if (element_size == 4)
            *reinterpret_cast<uint32_t*>(p) = value;
        else if (element_size == 2)
            *reinterpret_cast<uint16_t*>(p) = uint16_t(value);
        else
            *p = uint8_t(value);
    }
}

// The node's edges in one direction (cudaGraphNodeGetDependencies: in; cudaGraphNodeGetDependentNodes: out),
// with their types (programmatic edges stay programmatic).
struct Edges {
    std::vector<cudaGraphNode_t> nodes;
    std::vector<cudaGraphEdgeData> data;
};

using EdgeQuery = cudaError_t (*)(cudaGraphNode_t, cudaGraphNode_t*, cudaGraphEdgeData*, size_t*);

Edges edges(cudaGraphNode_t node, EdgeQuery query) {
    size_t n = 0;
    KILN_CUDA_CHECK(query(node, nullptr, nullptr, &n));
    Edges e{std::vector<cudaGraphNode_t>(n), std::vector<cudaGraphEdgeData>(n)};
    if (n) KILN_CUDA_CHECK(query(node, e.nodes.data(), e.data.data(), &n));
    return e;
}

}  // namespace

bool memset_nodes_kept(const char* setting) {
    if (!setting || !*setting || std::strcmp(setting, "kernels") == 0) return false;
    if (std::strcmp(setting, "keep") == 0) return true;
    fail(ErrorKind::InvalidArgument,
         std::string("KILN_CUDA_MEMSET_NODES=") + setting + ": kernels (the default) or keep (graphs keep them)");
}

int memset_nodes_to_kernels(cudaGraph_t graph) {
    static const bool keep = memset_nodes_kept(std::getenv("KILN_CUDA_MEMSET_NODES"));
    if (keep) return 0;
    size_t count = 0;
    KILN_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
    std::vector<cudaGraphNode_t> nodes(count);
    if (count) KILN_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
    int replaced = 0;
    for (cudaGraphNode_t node : nodes) {
        cudaGraphNodeType type{};
        KILN_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
        if (type != cudaGraphNodeTypeMemset) continue;
        cudaMemsetParams m{};
        KILN_CUDA_CHECK(cudaGraphMemsetNodeGetParams(node, &m));
        if (m.elementSize != 1 && m.elementSize != 2 && m.elementSize != 4) continue;
        size_t height = std::max<size_t>(m.height, 1);
        const size_t total = m.width * height;
        if (total == 0) continue;
        unsigned char* dst = static_cast<unsigned char*>(m.dst);
        unsigned value = m.value, element_size = m.elementSize;
        size_t width = m.width, pitch = m.pitch;
        void* args[] = {&dst, &value, &element_size, &width, &height, &pitch};
        cudaKernelNodeParams k{};
        k.func = reinterpret_cast<void*>(fill_kernel);
        k.blockDim = dim3(unsigned(std::min<size_t>(total, 256)));
        k.gridDim = dim3(unsigned(std::min<size_t>((total + 255) / 256, 1024)));
        k.kernelParams = args;
        const Edges in = edges(node, cudaGraphNodeGetDependencies);
        const Edges out = edges(node, cudaGraphNodeGetDependentNodes);
        cudaGraphNode_t fill = nullptr;
        KILN_CUDA_CHECK(cudaGraphAddKernelNode(&fill, graph, nullptr, 0, &k));
        // The edges as they were (into a memset, all full dependencies). Programmatic edges from the kernel
        // before were tried (session 11): after a cuBLASLt product, which does not trigger its dependents
        // early, the fill then started about 1 us after it rather than 0.45.
        for (size_t i = 0; i < in.nodes.size(); ++i)
            KILN_CUDA_CHECK(cudaGraphAddDependencies(graph, &in.nodes[i], &fill, &in.data[i], 1));
        for (size_t i = 0; i < out.nodes.size(); ++i)
            KILN_CUDA_CHECK(cudaGraphAddDependencies(graph, &fill, &out.nodes[i], &out.data[i], 1));
        KILN_CUDA_CHECK(cudaGraphDestroyNode(node));  // and its edges
        ++replaced;
    }
    return replaced;
}

}  // namespace kiln::cuda
