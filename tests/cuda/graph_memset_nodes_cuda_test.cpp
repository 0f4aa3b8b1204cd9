// memset_nodes_to_kernels (graph_memset_nodes.h): a graph's memset nodes become kernels that write the same
// bytes, at the same place in the graph's order. Memsets of 1, 2 and 4-byte elements, 1D and 2D (a pitch wider
// than a row, whose gap must keep its bytes), each between a copy before it (which must land first: the memset
// overwrites part of it) and a copy after it (which must see the memset's bytes); and one captured on a stream
// after a kernel, the edge a library's memset has.
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/graph_memset_nodes.h"
#include "cuda/kernel_test_support.h"

namespace kiln::cuda::test {
namespace {

struct Fill {
    unsigned element_size, value;
    size_t width, height, pitch;  // pitch in bytes; height 1: a 1D memset
};

// The bytes the memset leaves in a buffer of `bytes` that held `before`.
std::vector<unsigned char> filled(const Fill& f, std::vector<unsigned char> before) {
    for (size_t r = 0; r < f.height; ++r)
        for (size_t i = 0; i < f.width; ++i)
            std::memcpy(&before[r * f.pitch + i * f.element_size], &f.value, f.element_size);  // little-endian
    return before;
}

TEST(GraphMemsetNodesCuda, EachMemsetBecomesAKernelWritingTheSameBytesInTheSameOrder) {
    KILN_SKIP_WITHOUT_GPU();
    const Fill fills[] = {{1, 0x5a, 1, 1, 1},       {4, 0, 1, 1, 4},        {4, 0xdeadbeef, 1000, 1, 4000},
                          {2, 0xbeef, 333, 1, 666}, {1, 0xa5, 70001, 1, 70001}, {4, 7, 17, 5, 100},
                          {2, 0x1234, 3, 4, 10}};
    for (const Fill& f : fills) {
        const size_t bytes = f.height * f.pitch;
        std::vector<unsigned char> before(bytes);
        for (size_t i = 0; i < bytes; ++i) before[i] = static_cast<unsigned char>(i * 7 + 3);
        unsigned char *source = nullptr, *target = nullptr, *after = nullptr;
        ASSERT_EQ(cudaMalloc(&source, bytes), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&target, bytes), cudaSuccess);
        ASSERT_EQ(cudaMalloc(&after, bytes), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(source, before.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemset(target, 0, bytes), cudaSuccess);

        cudaGraph_t graph = nullptr;
        ASSERT_EQ(cudaGraphCreate(&graph, 0), cudaSuccess);
        cudaGraphNode_t in = nullptr, set = nullptr, out = nullptr;
        ASSERT_EQ(cudaGraphAddMemcpyNode1D(&in, graph, nullptr, 0, target, source, bytes, cudaMemcpyDeviceToDevice),
                  cudaSuccess);
        cudaMemsetParams m{};
        m.dst = target;
        m.value = f.value;
        m.elementSize = f.element_size;
        m.width = f.width;
        m.height = f.height;
        m.pitch = f.pitch;
        ASSERT_EQ(cudaGraphAddMemsetNode(&set, graph, &in, 1, &m), cudaSuccess);
        ASSERT_EQ(cudaGraphAddMemcpyNode1D(&out, graph, &set, 1, after, target, bytes, cudaMemcpyDeviceToDevice),
                  cudaSuccess);

        EXPECT_EQ(memset_nodes_to_kernels(graph), 1);
        size_t count = 0;
        ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &count), cudaSuccess);
        std::vector<cudaGraphNode_t> nodes(count);
        ASSERT_EQ(cudaGraphGetNodes(graph, nodes.data(), &count), cudaSuccess);
        EXPECT_EQ(count, 3u);
        for (cudaGraphNode_t n : nodes) {
            cudaGraphNodeType type{};
            ASSERT_EQ(cudaGraphNodeGetType(n, &type), cudaSuccess);
            EXPECT_NE(type, cudaGraphNodeTypeMemset);
        }

        cudaGraphExec_t exec = nullptr;
        ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
        ASSERT_EQ(cudaGraphLaunch(exec, nullptr), cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        std::vector<unsigned char> got(bytes);
        ASSERT_EQ(cudaMemcpy(got.data(), after, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
        EXPECT_EQ(got, filled(f, before)) << f.element_size << "-byte elements, " << f.width << " x " << f.height
                                          << ", pitch " << f.pitch;
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        cudaFree(source);
        cudaFree(target);
        cudaFree(after);
    }
}

// As a library's memset is captured: on a stream, after a kernel (whose edge to the fill becomes programmatic on
// devices with dependent launches: the fill must still see the kernel's writes before its own) and before a copy.
TEST(GraphMemsetNodesCuda, AMemsetCapturedAfterAKernelStillLandsAfterIt) {
    KILN_SKIP_WITHOUT_GPU();
    const int64_t planes = 3, h = 40, w = 50, out_count = planes * 4 * h * w;
    std::vector<float> x(size_t(planes * h * w));
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 1000) + 0.5f;
    float *dx = nullptr, *target = nullptr, *after = nullptr;
    const size_t bytes = size_t(out_count) * sizeof(float);
    ASSERT_EQ(cudaMalloc(&dx, x.size() * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&target, bytes), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&after, bytes), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    const size_t zeroed_from = 1000, zeroed = 4 * 777;  // bytes: part of what the kernel wrote
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
    upsample_nearest2x(dx, target, DType::F32, planes, h, w, s);
    ASSERT_EQ(cudaMemsetAsync(reinterpret_cast<char*>(target) + zeroed_from, 0, zeroed, s), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(after, target, bytes, cudaMemcpyDeviceToDevice, s), cudaSuccess);
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    EXPECT_EQ(memset_nodes_to_kernels(graph), 1);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    std::vector<float> expected(static_cast<size_t>(out_count));
    for (int64_t p = 0; p < planes; ++p)
        for (int64_t y = 0; y < 2 * h; ++y)
            for (int64_t xx = 0; xx < 2 * w; ++xx)
                expected[size_t((p * 2 * h + y) * 2 * w + xx)] = x[size_t((p * h + y / 2) * w + xx / 2)];
    std::memset(reinterpret_cast<char*>(expected.data()) + zeroed_from, 0, zeroed);
    for (int replay = 0; replay < 3; ++replay) {  // the target is rewritten each time: the order, every time
        ASSERT_EQ(cudaMemset(after, 0xff, bytes), cudaSuccess);
        ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
        std::vector<float> got(static_cast<size_t>(out_count));
        ASSERT_EQ(cudaMemcpy(got.data(), after, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
        EXPECT_EQ(std::memcmp(got.data(), expected.data(), bytes), 0) << "replay " << replay;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
    cudaFree(dx);
    cudaFree(target);
    cudaFree(after);
}

TEST(GraphMemsetNodesCuda, TheSettingIsKernelsOrKeep) {
    EXPECT_FALSE(memset_nodes_kept(nullptr));  // unset: the default
    EXPECT_FALSE(memset_nodes_kept(""));
    EXPECT_FALSE(memset_nodes_kept("kernels"));
    EXPECT_TRUE(memset_nodes_kept("keep"));
    for (const char* bad : {"yes", "0", "Keep"}) {
        try {
            memset_nodes_kept(bad);
            ADD_FAILURE() << "KILN_CUDA_MEMSET_NODES=" << bad << " was accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
            EXPECT_NE(std::string(e.what()).find(std::string("KILN_CUDA_MEMSET_NODES=") + bad), std::string::npos)
                << e.what();
        }
    }
}

TEST(GraphMemsetNodesCuda, AGraphWithoutMemsetsIsLeftAsItWas) {
    KILN_SKIP_WITHOUT_GPU();
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaGraphCreate(&graph, 0), cudaSuccess);
    cudaGraphNode_t empty = nullptr;
    ASSERT_EQ(cudaGraphAddEmptyNode(&empty, graph, nullptr, 0), cudaSuccess);
    EXPECT_EQ(memset_nodes_to_kernels(graph), 0);
    size_t count = 0;
    ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &count), cudaSuccess);
    EXPECT_EQ(count, 1u);
    cudaGraphDestroy(graph);
}

}  // namespace
}  // namespace kiln::cuda::test
