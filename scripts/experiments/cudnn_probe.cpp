// Experiment (not part of the build): how fast cuDNN's 3x3 convolutions run through its legacy API and through
// its graph (backend) API, in NCHW and NHWC, at SD's shapes; to choose kiln's convolution route.
// Build: g++ -O2 -std=c++17 cudnn_probe.cpp -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudnn -lcudart
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdio>
#include <functional>
#include <cstdlib>
#include <vector>

#include "probe_check.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

struct Shape { int n, c, h, w, k; };

static float time_ms(const std::function<void()>& fn, int runs = 20) {
    for (int i = 0; i < 3; ++i) fn();
    cudaEvent_t a, b;
    cudaEventCreate(&a), cudaEventCreate(&b);
    cudaEventRecord(a);
    for (int i = 0; i < runs; ++i) fn();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    return ms / runs;
}

static float legacy(cudnnHandle_t h, const Shape& s, bool nhwc, cudnnDataType_t t, void* x, void* w, void* y, void* ws,
                    size_t ws_bytes) {
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    cudnnCreateTensorDescriptor(&xd), cudnnCreateTensorDescriptor(&yd), cudnnCreateFilterDescriptor(&wd);
    cudnnCreateConvolutionDescriptor(&cd);
    const cudnnTensorFormat_t f = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    CK(cudnnSetTensor4dDescriptor(xd, f, t, s.n, s.c, s.h, s.w));
    CK(cudnnSetTensor4dDescriptor(yd, f, t, s.n, s.k, s.h, s.w));
    CK(cudnnSetFilter4dDescriptor(wd, t, f, s.k, s.c, 3, 3));
    CK(cudnnSetConvolution2dDescriptor(cd, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CK(cudnnSetConvolutionMathType(cd, CUDNN_TENSOR_OP_MATH));
    cudnnConvolutionFwdAlgoPerf_t perf[8];
    int found = 0;
    CK(cudnnFindConvolutionForwardAlgorithmEx(h, xd, x, wd, w, cd, yd, y, 8, &found, perf, ws, ws_bytes));
    CK(cudnnSetConvolutionMathType(cd, perf[0].mathType));
    const float one = 1, zero = 0;
    return time_ms([&] {
        CK(cudnnConvolutionForward(h, &one, xd, x, wd, w, cd, perf[0].algo, ws, perf[0].memory, &zero, yd, y));
    });
}

static cudnnBackendDescriptor_t tensor(int64_t uid, cudnnDataType_t t, int64_t n, int64_t c, int64_t hh, int64_t ww,
                                       bool nhwc) {
    cudnnBackendDescriptor_t d;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &d));
    int64_t dims[4] = {n, c, hh, ww};
    int64_t st[4] = {c * hh * ww, hh * ww, ww, 1};
    if (nhwc) st[0] = hh * ww * c, st[1] = 1, st[2] = ww * c, st[3] = c;
    int64_t align = 16;
    CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t));
    CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
    CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, st));
    CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    CK(cudnnBackendFinalize(d));
    return d;
}

static float graph(cudnnHandle_t h, const Shape& s, bool nhwc, cudnnDataType_t t, void* x, void* w, void* y, void* ws,
                   size_t ws_bytes, int* tried, bool filter_nhwc = true) {
    auto xd = tensor('x', t, s.n, s.c, s.h, s.w, nhwc), wd = tensor('w', t, s.k, s.c, 3, 3, nhwc && filter_nhwc),
         yd = tensor('y', t, s.n, s.k, s.h, s.w, nhwc);
    cudnnBackendDescriptor_t cd;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &cd));
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    int64_t dims = 2, one2[2] = {1, 1};
    CK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    CK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
    CK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims));
    CK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one2));
    CK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, one2));
    CK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, one2));
    CK(cudnnBackendSetAttribute(cd, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, one2));
    CK(cudnnBackendFinalize(cd));
    cudnnBackendDescriptor_t op;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, &op));
    float alpha = 1, beta = 0;
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xd));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &wd));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &yd));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                1, &cd));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta));
    CK(cudnnBackendFinalize(op));
    cudnnBackendDescriptor_t g;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g));
    CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op));
    CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    CK(cudnnBackendFinalize(g));
    cudnnBackendDescriptor_t heur;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
    cudnnBackendHeurMode_t hm = CUDNN_HEUR_MODE_A;
    CK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g));
    CK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm));
    CK(cudnnBackendFinalize(heur));
    int64_t count = 0;
    CK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
    std::vector<cudnnBackendDescriptor_t> cfgs(count);
    for (auto& c : cfgs) CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &c));
    int64_t got = 0;
    CK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                cfgs.data()));
    float best = 1e30f;
    *tried = 0;
    for (int64_t i = 0; i < got && i < 8; ++i) {
        cudnnBackendDescriptor_t plan;
        CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan));
        CK(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
        CK(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                    &cfgs[i]));
        if (cudnnBackendFinalize(plan) != CUDNN_STATUS_SUCCESS) continue;
        int64_t wsz = 0, n1 = 0;
        CK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n1, &wsz));
        if (size_t(wsz) > ws_bytes) continue;
        cudnnBackendDescriptor_t vp;
        CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp));
        int64_t uids[3] = {'x', 'w', 'y'};
        void* ptrs[3] = {x, w, y};
        CK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids));
        CK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs));
        CK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
        CK(cudnnBackendFinalize(vp));
        ++*tried;
        const float ms = time_ms([&] { CK(cudnnBackendExecute(h, plan, vp)); });
        if (ms < best) best = ms;
    }
    return best;
}

int main() {
    cudnnHandle_t h;
    CK(cudnnCreate(&h));
    const Shape shapes[] = {{2, 320, 64, 64, 320},   {2, 640, 32, 32, 640},     {2, 1280, 16, 16, 1280},
                            {2, 1280, 8, 8, 1280},   {2, 960, 64, 64, 320},     {1, 512, 64, 64, 512},
                            {1, 512, 128, 128, 512}, {1, 512, 256, 256, 512},   {1, 256, 512, 512, 256},
                            {1, 128, 1024, 1024, 128}, {1, 256, 1024, 1024, 128}};
    const size_t big = size_t(1) << 30, ws_bytes = size_t(512) << 20;
    void *x, *w, *y, *ws;
    CK(cudaMalloc(&x, big));
    CK(cudaMalloc(&w, 64 << 20));
    CK(cudaMalloc(&y, big));
    CK(cudaMalloc(&ws, ws_bytes));
    cudaMemset(x, 0x3c, big), cudaMemset(w, 0x1c, 64 << 20);
    for (cudnnDataType_t t : {CUDNN_DATA_HALF, CUDNN_DATA_BFLOAT16}) {
        for (const Shape& s : shapes) {
            const double tf = 2.0 * s.n * s.k * s.h * s.w * s.c * 9 / 1e9;
            const float l_nchw = legacy(h, s, false, t, x, w, y, ws, ws_bytes);
            const float l_nhwc = legacy(h, s, true, t, x, w, y, ws, ws_bytes);
            int t1 = 0, t2 = 0, t3 = 0;
            const float g_kcrs = graph(h, s, true, t, x, w, y, ws, ws_bytes, &t3, false);
            std::printf("  nhwc with kcrs filter: %.0f TF/s (%d plans) %.1f us\n", tf / g_kcrs, t3, g_kcrs * 1e3);
            const float g_nchw = graph(h, s, false, t, x, w, y, ws, ws_bytes, &t1);
            const float g_nhwc = graph(h, s, true, t, x, w, y, ws, ws_bytes, &t2);
            std::printf("%s %d,%d,%dx%d->%d  TF/s: legacy nchw %5.0f nhwc %5.0f | graph nchw %5.0f (%d) nhwc %5.0f (%d)"
                        "  [us %.1f %.1f %.1f %.1f]\n",
                        t == CUDNN_DATA_HALF ? "f16 " : "bf16", s.n, s.c, s.h, s.w, s.k, tf / l_nchw, tf / l_nhwc,
                        tf / g_nchw, t1, tf / g_nhwc, t2, l_nchw * 1e3, l_nhwc * 1e3, g_nchw * 1e3, g_nhwc * 1e3);
        }
    }
}
