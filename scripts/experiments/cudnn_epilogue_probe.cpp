// Experiment (not part of the build): whether cuDNN's graph API runs a channels-last 3x3 convolution as fast when
// it also writes its output in NCHW and adds the bias on the way, which would spare kiln's NHWC route its
// from_nhwc pass. (It does not: docs/CUDA.md has the figures.) Per shape and variant: the fastest of the heuristics' first 8 engines (mode A, then
// the fallback list), timed as median_ms says.
// Build: g++ -O2 -std=c++17 cudnn_epilogue_probe.cpp -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudnn -lcudart
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "probe_check.h"

namespace {

struct Desc {
    cudnnBackendDescriptor_t d = nullptr;
    explicit Desc(cudnnBackendDescriptorType_t t) { CK(cudnnBackendCreateDescriptor(t, &d)); }
    ~Desc() {
        if (d) cudnnBackendDestroyDescriptor(d);
    }
    Desc(Desc&& o) noexcept : d(o.d) { o.d = nullptr; }
    Desc(const Desc&) = delete;
    template <class V>
    void set(cudnnBackendAttributeName_t n, cudnnBackendAttributeType_t t, int64_t c, const V* v) {
        CK(cudnnBackendSetAttribute(d, n, t, c, v));
    }
    cudnnStatus_t finalize() { return cudnnBackendFinalize(d); }
};

const int64_t kAlign = 16;

// dims in NCHW order; nhwc picks the strides.
Desc tensor(int64_t uid, cudnnDataType_t t, int64_t n, int64_t c, int64_t h, int64_t w, bool nhwc, bool is_virtual) {
    Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t dims[4] = {n, c, h, w};
    const int64_t s_nhwc[4] = {h * w * c, 1, w * c, c}, s_nchw[4] = {c * h * w, h * w, w, 1};
    d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t);
    d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    d.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, nhwc ? s_nhwc : s_nchw);
    d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &kAlign);
    const bool v = is_virtual;
    d.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
    CK(d.finalize());
    return d;
}

Desc pointwise_add(const Desc& a, const Desc& b, const Desc& y) {
    Desc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    const cudnnPointwiseMode_t mode = CUDNN_POINTWISE_ADD;
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    pw.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    CK(pw.finalize());
    Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw.d);
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a.d);
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b.d);
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.d);
    CK(op.finalize());
    return op;
}

struct Shape {
    const char* name;
    int64_t n, c, h, w, k;
};

// The median over 7 rounds of the mean of 20 back-to-back runs (so that the host's time to queue a run hides
// behind the GPU's work on the previous one).
float median_ms(const std::function<void()>& fn) {
    for (int i = 0; i < 3; ++i) fn();
    std::vector<float> t;
    cudaEvent_t a, b;
    cudaEventCreate(&a), cudaEventCreate(&b);
    for (int round = 0; round < 7; ++round) {
        cudaEventRecord(a);
        for (int i = 0; i < 20; ++i) fn();
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        t.push_back(ms / 20);
    }
    cudaEventDestroy(a), cudaEventDestroy(b);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

enum : int64_t { kX = 1, kW, kY, kB, kConvOut };

// variant: 0 plain NHWC out; 1 NCHW out; 2 NHWC out + bias; 3 NCHW out + bias
float run_variant(cudnnHandle_t h, const Shape& s, int variant, void* x, void* w, void* y, void* bias, void* ws,
                  size_t ws_bytes, std::string* engine_note) {
    const cudnnDataType_t f16 = CUDNN_DATA_HALF, f32 = CUDNN_DATA_FLOAT;
    const bool nchw_out = variant == 1 || variant == 3, with_bias = variant >= 2;
    Desc xd = tensor(kX, f16, s.n, s.c, s.h, s.w, true, false);
    Desc wd = tensor(kW, f16, s.k, s.c, 3, 3, true, false);
    // The convolution's own output: the final y, or a virtual float32 tensor the epilogue reads.
    Desc cd = with_bias ? tensor(kConvOut, f32, s.n, s.k, s.h, s.w, true, true)
                        : tensor(kY, f16, s.n, s.k, s.h, s.w, !nchw_out, false);
    Desc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    const cudnnDataType_t acc = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t dims = 2, ones[2] = {1, 1}, pad[2] = {1, 1};
    conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &acc);
    conv.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    conv.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
    conv.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, ones);
    conv.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, ones);
    conv.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
    conv.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
    CK(conv.finalize());
    Desc op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
    const float alpha = 1.0f, beta = 0.0f;
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xd.d);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &wd.d);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd.d);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv.d);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    CK(op.finalize());
    std::vector<Desc> keep;
    keep.reserve(8);  // references into it stay valid
    std::vector<cudnnBackendDescriptor_t> ops{op.d};
    std::vector<int64_t> uids{kX, kW, kY};
    std::vector<void*> ptrs{x, w, y};
    if (with_bias) {
        keep.push_back(tensor(kB, f16, 1, s.k, 1, 1, true, false));
        Desc& bd = keep.back();
        keep.push_back(tensor(kY, f16, s.n, s.k, s.h, s.w, !nchw_out, false));
        Desc& yd = keep.back();
        keep.push_back(pointwise_add(cd, bd, yd));
        ops.push_back(keep.back().d);
        uids.push_back(kB);
        ptrs.push_back(bias);
    }
    Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops.size()), ops.data());
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    if (graph.finalize() != CUDNN_STATUS_SUCCESS) {
        *engine_note = "graph refused";
        return -1;
    }
    Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()), uids.data());
    pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(ptrs.size()), ptrs.data());
    pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    CK(pack.finalize());
    float best = -1;
    int tried = 0;
    for (cudnnBackendHeurMode_t hm : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
        Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph.d);
        heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm);
        if (heur.finalize() != CUDNN_STATUS_SUCCESS) continue;
        int64_t avail = 0;
        if (cudnnBackendGetAttribute(heur.d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &avail,
                                     nullptr) != CUDNN_STATUS_SUCCESS)
            continue;
        std::vector<Desc> cfgs;
        for (int64_t i = 0; i < avail; ++i) cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        std::vector<cudnnBackendDescriptor_t> raw;
        for (Desc& c : cfgs) raw.push_back(c.d);
        int64_t got = 0;
        if (avail > 0)
            CK(cudnnBackendGetAttribute(heur.d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, avail, &got,
                                        raw.data()));
        for (int64_t i = 0; i < got && i < 8; ++i) {
            Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
            plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
            plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw[i]);
            if (plan.finalize() != CUDNN_STATUS_SUCCESS) continue;
            int64_t need = 0, n = 0;
            CK(cudnnBackendGetAttribute(plan.d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &need));
            if (size_t(need) > ws_bytes) continue;
            if (cudnnBackendExecute(h, plan.d, pack.d) != CUDNN_STATUS_SUCCESS) continue;
            ++tried;
            const float ms = median_ms([&] { CK(cudnnBackendExecute(h, plan.d, pack.d)); });
            if (best < 0 || ms < best) best = ms;
        }
        if (tried) {
            *engine_note = std::string(hm == CUDNN_HEUR_MODE_A ? "mode A" : "fallback") + ", " + std::to_string(tried) +
                           " engines";
            break;
        }
    }
    if (!tried) *engine_note = "no engine";
    return best;
}

}  // namespace

int main() {
    std::setvbuf(stdout, nullptr, _IONBF, 0);
    cudnnHandle_t h;
    CK(cudnnCreate(&h));
    const Shape shapes[] = {{"sd15 unet 64x64 320", 2, 320, 64, 64, 320},   {"sd15 unet 32x32 640", 2, 640, 32, 32, 640},
                            {"sd15 unet 16x16 1280", 2, 1280, 16, 16, 1280}, {"sd15 unet 8x8 1280", 2, 1280, 8, 8, 1280},
                            {"sd15 vae 128x128 512", 1, 512, 128, 128, 512}, {"sd15 vae 512x512 128", 1, 128, 512, 512, 128}};
    const size_t ws_bytes = size_t(512) << 20;
    void* ws;
    CK(cudaMalloc(&ws, ws_bytes));
    const char* names[] = {"nhwc out", "nchw out", "nhwc out + bias", "nchw out + bias"};
    for (const Shape& s : shapes) {
        const size_t xs = size_t(s.n * s.c * s.h * s.w), ys = size_t(s.n * s.k * s.h * s.w), wsz = size_t(s.k * s.c * 9);
        void *x, *w, *y, *b;
        CK(cudaMalloc(&x, xs * 2));
        CK(cudaMalloc(&w, wsz * 2));
        CK(cudaMalloc(&y, ys * 2));
        CK(cudaMalloc(&b, size_t(s.k) * 2));
        std::vector<__half> hx(std::max({xs, ys, wsz}));
        for (size_t i = 0; i < hx.size(); ++i) hx[i] = __float2half(float((i * 2654435761u) % 1000) / 1000.0f - 0.5f);
        CK(cudaMemcpy(x, hx.data(), xs * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(w, hx.data(), wsz * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(b, hx.data(), size_t(s.k) * 2, cudaMemcpyHostToDevice));
        const double gflop = 2.0 * double(s.n) * s.k * s.h * s.w * s.c * 9 / 1e9;
        for (int v = 0; v < 4; ++v) {
            std::string note;
            const float ms = run_variant(h, s, v, x, w, y, b, ws, ws_bytes, &note);
            std::printf("%-24s %-28s %8.4f ms %7.1f TFLOP/s  (%s)\n", s.name, names[v], ms,
                        ms > 0 ? gflop / ms : 0.0, note.c_str());
        }
        cudaFree(x), cudaFree(w), cudaFree(y), cudaFree(b);
    }
    return 0;
}
