#include "backends/cuda/cuda_device_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#if !defined(KILN_HIP)
#include <nvtx3/nvToolsExt.h>  // header-only (NVTX 3), in the CUDA toolkit
#endif

#include "backends/cuda/attention.h"
#include "backends/cuda/causal_mask.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/event_timer.h"
#include "backends/cuda/kernels.h"
#include "kiln/error.h"
#include "ops/device_op_checks.h"
#include "ops/op_list.h"
#include "ops/op_observer.h"

namespace kiln::cuda {

namespace {

std::string desc(const char* name, const Tensor& t) { return ops::device_operand(name, t); }

[[noreturn]] void bad(const char* op, const std::string& what) {
    fail(ErrorKind::InvalidArgument, std::string("ops::") + op + " (cuda): " + what);
}

const char* at(const Tensor& t, int64_t elements) { return static_cast<const char*>(ops::device_at(t, elements)); }
char* at(Tensor& t, int64_t elements) { return static_cast<char*>(ops::device_at(t, elements)); }

void same_place(const char* op, const Tensor& x, const Tensor& t, const char* name) {
    ops::require_same_place(op, x, t, name);
}

int64_t esize(const Tensor& t) { return int64_t(dtype_size(t.dtype())); }

// Column buffers of im2col are tiled to stay under this (elements x dtype size).
constexpr int64_t kColumnBudgetBytes = int64_t(256) << 20;
// Attention by products keeps its per-block scores (float32, plus the rounded probabilities) under this.
constexpr int64_t kScoreBudgetBytes = int64_t(512) << 20;

// A scratch budget within a --vram cap: at most a share of the cap (smaller tiles, more products), so that one
// column buffer or score block does not ask for half of a 512 MiB cap at once; the full budget without a cap.
int64_t scratch_budget(int64_t full, int64_t cap, int64_t share) {
    return cap > 0 ? std::clamp<int64_t>(cap / share, int64_t(16) << 20, full) : full;
}

}  // namespace

// An op's spans for the profiler (ops/op_observer.h). Kernels run asynchronously, so the host span is the
// time to queue them; while the profiler wants GPU spans, events on the stream around the kernels time them
// on the GPU (gpu_timeline.h), read back at the next wait. KILN_CUDA_SYNC_OPS=1 also waits for the GPU at the
// end of every op, so that the host span is GPU time as well (and CUDA graphs are off: a wait cannot be recorded).
// The op's name from the one op list (ops/op_list.h), without linking the ops library.
static const char* range_name(ops::OpKind kind) {
    switch (kind) {
#define KILN_RANGE_NAME(kind, fn) \
    case ops::OpKind::kind: return #fn;
        KILN_OP_LIST(KILN_RANGE_NAME)
#undef KILN_RANGE_NAME
    }
    return "op";
}

// Every op also opens an NVTX range named after it, for Nsight Systems and ncu's NVTX filters.
class CudaDeviceOps::Timed {
public:
    Timed(const CudaBackend& backend, ops::OpKind kind, double flops = 0.0)
        : backend_(backend), scope_(kind, flops), gpu_(ops::device_spans_wanted()) {
        if (gpu_) backend_.timeline().begin(kind, flops);
#if !defined(KILN_HIP)
        nvtxRangePushA(range_name(kind));
#endif
    }
    ~Timed() {
        if (gpu_) backend_.timeline().end();
        if (backend_.sync_ops()) (void)cudaStreamSynchronize(backend_.stream());
#if !defined(KILN_HIP)
        nvtxRangePop();
#endif
    }

private:
    const CudaBackend& backend_;
    ops::OpScope scope_;  // the host span ends after the GPU's end event is queued
    bool gpu_;
};

// y = x w^T + b (+ y when accumulate): cuBLASLt with the bias in its epilogue, and the old y as C with beta 1
// when accumulating (in place: C and D are the same matrix).
void CudaDeviceOps::project(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, bool accumulate) const {
    const int64_t k = w.dim(1), n = w.dim(0), m = k ? x.numel() / k : 0;
    // Counted for bench's FLOP totals and the GPU span's rate.
    Timed timed(backend_, ops::OpKind::Linear, 2.0 * double(m) * double(n) * double(k));
    GemmArgs g;
    g.trans_a = true;  // w [n, k] row-major is k x n column-major
    g.m = n, g.n = m, g.k = k;
    g.a = w.device_data(), g.lda = k;
    g.b = x.device_data(), g.ldb = k;
    g.c = y.device_data(), g.ldc = n;
    g.ab_type = g.c_type = x.dtype();
    g.tf32 = backend_.fast_float32();
    g.bias = b ? b->device_data() : nullptr;  // added in the product's epilogue: no pass of its own
    g.beta = accumulate ? 1.0f : 0.0f;
    backend_.gemm().run(g, backend_.stream());
}

void CudaDeviceOps::check_linear(const char* op, const Tensor& x, const Tensor& w, const Tensor* b) const {
    if (x.rank() < 1 || w.rank() != 2 || x.dim(-1) != w.dim(1)) bad(op, desc("x", x) + " and " + desc("w", w));
    same_place(op, x, w, "w");
    if (b) {
        same_place(op, x, *b, "b");
        if (b->numel() != w.dim(0)) bad(op, desc("b", *b) + " for " + desc("w", w));
    }
}

Tensor CudaDeviceOps::linear(const Tensor& x, const Tensor& w, const Tensor* b) const {
    check_linear("linear", x, w, b);
    Shape shape = x.shape();
    shape.back() = w.dim(0);
    Tensor y = Tensor::empty_on(backend_, shape, x.dtype());
    if (y.numel() == 0) return y;
    project(x, w, b, y, false);
    return y;
}

void CudaDeviceOps::linear_add_(Tensor& acc, const Tensor& x, const Tensor& w, const Tensor* b) const {
    check_linear("linear_add_", x, w, b);
    same_place("linear_add_", x, acc, "acc");
    Shape shape = x.shape();
    shape.back() = w.dim(0);
    if (acc.shape() != shape) bad("linear_add_", desc("acc", acc) + " for the product's " + shape_str(shape));
    if (acc.numel() == 0) return;
    project(x, w, b, acc, true);
}

// x (or, upsampled, its nearest-2x upsampling) convolved, with GroupNorm+SiLU applied to its values when stats
// is set; into a new tensor, or added onto *f.accumulate (then the result is empty). The fusions run on the
// channels-last route once the shape's first call has chosen it; elsewhere the same ops are composed.
Tensor CudaDeviceOps::conv(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int padding,
                           const Tensor* stats, const Tensor* gamma, const Tensor* beta, int groups,
                           ConvFusion f) const {
    if (x.rank() != 4 || w.rank() != 4 || w.dim(1) != x.dim(1) || w.dim(2) != w.dim(3) || stride < 1 || padding < 0)
        bad("conv2d", desc("x", x) + ", " + desc("w", w) + ", stride " + std::to_string(stride) + ", padding " +
                          std::to_string(padding) + " (square kernels only)");
    same_place("conv2d", x, w, "w");
    const int64_t up = f.upsampled ? 2 : 1, h = up * x.dim(2), wd = up * x.dim(3), kk = w.dim(2);
    if (h + 2 * padding < kk || wd + 2 * padding < kk) bad("conv2d", desc("x", x) + " is smaller than the kernel");
    if (b) {
        same_place("conv2d", x, *b, "b");
        if (b->numel() != w.dim(0)) bad("conv2d", desc("b", *b) + " for " + desc("w", w));
    }
    const ConvShape sh = conv_shape(x.dim(0), x.dim(1), h, wd, w, stride, padding, x.dtype());
    if (f.accumulate) {
        same_place("conv2d", x, *f.accumulate, "y");
        if (f.accumulate->shape() != Shape{sh.n, sh.cout, sh.oh, sh.ow})
            bad("conv2d", desc("y", *f.accumulate) + " to add the convolution of " + desc("x", x) + " onto");
    }
    if (f.image_bias) {
        same_place("conv2d", x, *f.image_bias, "image_bias");
        const Tensor& ib = *f.image_bias;
        if (ib.rank() != 2 || ib.dim(0) != sh.n || f.image_bias_at < 0 || f.image_bias_at + sh.cout > ib.dim(1) ||
            f.upsampled || f.accumulate)
            bad("conv2d", desc("image_bias", ib) + " at column " + std::to_string(f.image_bias_at) + " for " +
                              desc("w", w) + " (alone, [N, >= at + Cout])");
    }
    const bool fused = f.upsampled || f.accumulate || f.image_bias;
    if (fused && !(on_nhwc_route(sh, stats != nullptr) && (!f.upsampled || h * wd < (int64_t(1) << 31)))) {
        if (f.upsampled)
            return conv(upsample_nearest2x(x), w, b, stride, padding, stats, gamma, beta, groups,
                        {false, f.accumulate, nullptr, 0, f.accumulate_bias});
        if (f.image_bias) {
            Tensor y = conv(x, w, b, stride, padding, stats, gamma, beta, groups);
            add_channel_bias_(y, image_bias_columns(*f.image_bias, f.image_bias_at, sh.cout));
            return y;
        }
        if (f.accumulate_bias)
            add_channel_bias(f.accumulate->device_data(), f.accumulate_bias->device_data(), f.accumulate->dtype(),
                             sh.n, sh.cout, sh.oh * sh.ow, backend_.stream(), true);
        add_(*f.accumulate, conv(x, w, b, stride, padding, stats, gamma, beta, groups));
        return Tensor();
    }
    Tensor y = f.accumulate ? Tensor() : Tensor::empty_on(backend_, {sh.n, sh.cout, sh.oh, sh.ow}, x.dtype());
    Tensor& out = f.accumulate ? *f.accumulate : y;
    if (out.numel() == 0) return y;
    Timed timed(backend_, ops::OpKind::Conv2d,
                2.0 * double(sh.n) * double(sh.cout) * double(sh.oh * sh.ow) * double(sh.cin * sh.k * sh.k));
    const ConvCall call{x,  w,          b,  stats, gamma, beta, groups, sh, f.upsampled, f.accumulate != nullptr,
                        f.image_bias, f.image_bias_at, f.accumulate_bias};
    if (fused)
        run_conv_route(ConvRoute::CudnnNhwc, call, out);
    else
        conv_routed(call, out);
    return y;
}

// The GroupNorm+SiLU a fused convolution applies to its input, for the kernels that apply it as they read:
// statistics of every image from `first_image` on (im2col takes one image at a time). Call is
// CudaDeviceOps::ConvCall.
static Im2colNorm group_norm_terms(const Tensor& stats, const Tensor& gamma, const Tensor& beta, int groups,
                                   int64_t first_image = 0) {
    Im2colNorm norm;
    norm.stats = static_cast<const float*>(stats.device_data()) + first_image * groups * 2;
    norm.gamma = gamma.device_data();
    norm.beta = beta.device_data();
    norm.groups = groups;
    return norm;
}
template <class Call>
static Im2colNorm fused_norm(const Call& c, int64_t first_image = 0) {
    return group_norm_terms(*c.stats, *c.gamma, *c.beta, c.groups, first_image);
}

static const char* route_name(CudaDeviceOps::ConvRoute r) {
    switch (r) {
        case CudaDeviceOps::ConvRoute::Im2col: return "im2col";
        case CudaDeviceOps::ConvRoute::Cudnn: return "cudnn";
        case CudaDeviceOps::ConvRoute::CudnnNhwc: return "nhwc";
        case CudaDeviceOps::ConvRoute::FewOutputs: return "few";
    }
    return "?";
}

void CudaDeviceOps::run_conv_route(ConvRoute route, const ConvCall& c, Tensor& y) const {
    switch (route) {
        case ConvRoute::Im2col: conv_im2col(c, y); break;
        case ConvRoute::Cudnn: conv_cudnn(c, y); break;
        case ConvRoute::CudnnNhwc: conv_cudnn_nhwc(c, y); break;
        case ConvRoute::FewOutputs: conv_few_outputs(c, y); break;
    }
    ++route_calls_[static_cast<size_t>(route)];  // counted once it ran (a route may throw: no kernel)
}

// Runs the convolution on this shape's route, choosing it on the shape's first call (outside any recording:
// a recorded call's first run is eager). With KILN_CUDA_CONV unset every route there is runs once (cuDNN
// choosing its own algorithm on a first call) and once more between events, and the fastest is kept; with
// one route named, that route, or im2col where it has no kernel for the shape.
void CudaDeviceOps::conv_routed(const ConvCall& c, Tensor& y) const {
    const ConvShape& sh = c.shape;
    const RouteKey key = route_key(sh, c.stats != nullptr);
    if (auto it = routes_.find(key); it != routes_.end()) return run_conv_route(it->second, c, y);
    std::vector<ConvRoute> candidates;
    if (backend_.conv_few_outputs() &&
        cuda::conv_few_outputs_fits(sh.cout, sh.k, sh.stride, sh.padding, sh.h, sh.w, sh.cin))
        candidates.push_back(ConvRoute::FewOutputs);
    if (backend_.cudnn_nhwc()) candidates.push_back(ConvRoute::CudnnNhwc);
    if (backend_.cudnn()) candidates.push_back(ConvRoute::Cudnn);
    candidates.push_back(ConvRoute::Im2col);
    cudaStream_t s = backend_.stream();
    EventTimer timer;
    float best_ms = -1.0f;
    ConvRoute best = ConvRoute::Im2col, last = ConvRoute::Im2col;
    std::string log;  // KILN_CUDA_CONV_LOG=1: each shape's timings on stderr
    for (ConvRoute route : candidates) {
        try {
            run_conv_route(route, c, y);
        } catch (const Error& e) {
            if (route == ConvRoute::Im2col) throw;
            // No cuDNN kernel for this shape, or it needs more memory than is left (a --vram cap): the next.
            continue;
        }
        last = route;
        if (!backend_.conv_measured()) {  // the named route (or im2col after it) works here
            best = route;
            break;
        }
        float ms = 0.0f;
        try {
            ms = timer.mean_ms(s, 3, [&] { run_conv_route(route, c, y); });
        } catch (const Error& e) {
            if (e.kind() != ErrorKind::OutOfMemory || route == ConvRoute::Im2col) throw;
            continue;
        }
        if (best_ms < 0.0f || ms < best_ms) best_ms = ms, best = route;
        log += std::string(" ") + route_name(route) + " " + std::to_string(ms * 1000.0f).substr(0, 7) + " us";
    }
    routes_[key] = best;
    if (backend_.conv_log())
        std::fprintf(stderr, "kiln: conv2d %lldx%lldx%lldx%lld -> %lld, k%lld s%lld%s %s:%s -> %s\n",
                     (long long)sh.n, (long long)sh.cin, (long long)sh.h, (long long)sh.w, (long long)sh.cout,
                     (long long)sh.k, (long long)sh.stride, c.stats ? " +groupnorm/silu" : "", dtype_name(sh.type),
                     log.c_str(), route_name(best));
    if (best != last) run_conv_route(best, c, y);  // y holds the last route's result; keep the chosen one's
}

// cuDNN's workspace callback: device scratch of the bytes asked, kept alive in `keep` by the caller.
std::function<void*(size_t)> CudaDeviceOps::scratch_in(std::vector<Tensor>& keep) const {
    return [this, &keep](size_t bytes) {
        keep.push_back(Tensor::empty_on(backend_, {int64_t((bytes + 1) / 2)}, DType::F16));
        return keep.back().device_data();
    };
}

void CudaDeviceOps::conv_cudnn(const ConvCall& c, Tensor& y) const {
    const ConvShape& sh = c.shape;
    const Tensor& x = c.x;
    cudaStream_t s = backend_.stream();
    // cuDNN cannot fuse the norm: normalise (and SiLU) into a copy first, then convolve.
    Tensor normed;
    if (c.stats) {
        normed = Tensor::empty_on(backend_, x.shape(), x.dtype());
        group_norm_apply(x.device_data(), static_cast<const float*>(c.stats->device_data()), c.gamma->device_data(),
                         c.beta->device_data(), normed.device_data(), x.dtype(), sh.n, sh.cin, sh.h * sh.w, c.groups,
                         true, s);
    }
    std::vector<Tensor> scratch;  // alive until the convolution is queued; the stream orders its reuse
    Tensor wn;
    backend_.cudnn()->run(sh, c.stats ? normed.device_data() : x.device_data(), pytorch_filter(c.w, wn),
                          y.device_data(), s, scratch_in(scratch));
    if (c.b) add_channel_bias(y.device_data(), c.b->device_data(), y.dtype(), sh.n, sh.cout, sh.oh * sh.ow, s, true);
}

// cuDNN's channels-last engines on NHWC copies: the input transposed (GroupNorm+SiLU applied on the way),
// the filter transposed to [cout, k, k, cin] on every call (kept nowhere: no second copy of the weights; at
// most a few percent of the convolution's time, as the filter stays in L2), the result transposed back with
// the bias added. The transposes move 2 x (input + output) bytes, which the faster engines repay many
// times over at SD's shapes (docs/CUDA.md).
void CudaDeviceOps::conv_cudnn_nhwc(const ConvCall& c, Tensor& y) const {
    const ConvShape& sh = c.shape;
    const Tensor& x = c.x;
    cudaStream_t s = backend_.stream();
    Tensor xt = Tensor::empty_on(backend_, {sh.n, sh.h, sh.w, sh.cin}, x.dtype());
    const Im2colNorm norm = c.stats ? fused_norm(c) : Im2colNorm{};
    to_nhwc(x.device_data(), xt.device_data(), x.dtype(), sh.n, sh.cin, sh.h * sh.w, c.stats ? &norm : nullptr, s,
            c.upsampled ? sh.w : 0);
    Tensor wt;
    const void* filter = channels_last_filter(c.w, wt);
    Tensor yt = Tensor::empty_on(backend_, {sh.n, sh.oh, sh.ow, sh.cout}, x.dtype());
    std::vector<Tensor> scratch;  // alive until the convolution is queued; the stream orders its reuse
    backend_.cudnn_nhwc()->run(sh, xt.device_data(), filter, yt.device_data(), s, scratch_in(scratch));
    from_nhwc(yt.device_data(), c.b ? c.b->device_data() : nullptr, y.device_data(), y.dtype(), sh.n, sh.oh * sh.ow,
              sh.cout, s, c.accumulate, c.image_bias ? at(*c.image_bias, c.image_bias_at) : nullptr,
              c.image_bias ? c.image_bias->dim(1) : 0,
              c.accumulate_bias ? c.accumulate_bias->device_data() : nullptr);
}

// The direct kernel for 1 to 4 output channels (conv_few_outputs.cu), on NCHW: no copies around it.
void CudaDeviceOps::conv_few_outputs(const ConvCall& c, Tensor& y) const {
    const ConvShape& sh = c.shape;
    const Im2colNorm norm = c.stats ? fused_norm(c) : Im2colNorm{};
    Tensor wn, partial;
    const int splits =
        conv_few_outputs_splits(sh.n, sh.cin, sh.h, sh.w, int(sh.padding), backend_.multiprocessors());
    if (splits > 1) partial = Tensor::empty_on(backend_, {splits, sh.n, sh.cout, sh.oh, sh.ow}, DType::F32);
    cuda::conv_few_outputs(c.x.device_data(), pytorch_filter(c.w, wn), c.b ? c.b->device_data() : nullptr,
                           y.device_data(), y.dtype(), sh.n, sh.cin, sh.h, sh.w, sh.cout, int(sh.padding),
                           c.stats ? &norm : nullptr, backend_.stream(), splits,
                           splits > 1 ? static_cast<float*>(partial.device_data()) : nullptr);
}

// A block-format weight's transient. A filter of more than one tap is widened straight into the channels-last
// order of the NHWC route and marked so, as channels_last_filter would leave it, so that no transpose follows
// (it cost about 1 ms of a q8_0 SD 1.5 UNet call on an H200). Dequantized ahead on a side stream where the
// backend does (dequantize_ahead.h), else on the stream right before the product; a mark goes with the
// buffer's next use or when the transient is freed (CudaBackend::deallocate).
Tensor CudaDeviceOps::widen_weight(const Tensor& w, DType dtype) const {
    const int64_t cout = w.rank() == 4 ? w.dim(0) : 0, cin = w.rank() == 4 ? w.dim(1) : 0,
                  taps = w.rank() == 4 ? w.dim(2) * w.dim(3) : 1;
    const bool channels_last =
        taps > 1 && cin <= 4096 && cout <= 65535 && cuda::dequantize_krsc_supported(cin, taps);
    if (DequantizeAhead* ahead = backend_.dequantize_ahead()) return ahead->widen(w, dtype, channels_last);
    Tensor wide = Tensor::empty_on(backend_, w.shape(), dtype);
    write_widened(backend_, w, wide, channels_last, backend_.stream());
    return wide;
}

// The filter w [cout, cin, k, k] as [cout, k, k, cin] for the NHWC route. A 1x1 filter is the same in both. A
// larger one is rearranged in its own storage on its first use outside a stream capture (the backend marks
// it: CudaBackend::channels_last), and used as it is from then on; inside a capture (or with more than 4096
// input channels, which the rearrangement back does not take) it goes into `keep`, a copy for this call.
const void* CudaDeviceOps::channels_last_filter(const Tensor& w, Tensor& keep) const {
    const int64_t cout = w.dim(0), cin = w.dim(1), taps = w.dim(2) * w.dim(3);
    if (taps == 1 || backend_.channels_last(w.device_data())) return w.device_data();
    cudaStream_t s = backend_.stream();
    keep = Tensor::empty_on(backend_, {cout, w.dim(2), w.dim(3), cin}, w.dtype());
    filter_to_krsc(w.device_data(), keep.device_data(), w.dtype(), cout, cin, taps, s);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    KILN_CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
    if (capture != cudaStreamCaptureStatusNone || cin > 4096) return keep.device_data();
    void* storage = const_cast<void*>(w.device_data());  // same values, another order: the backend knows which
    backend_.copy(storage, keep.device_data(), int64_t(keep.numel()) * int64_t(dtype_size(w.dtype())));
    backend_.mark_channels_last(storage, {cout, cin, taps, w.dtype()});
    return storage;
}

// The filter in PyTorch's [cout, cin, k, k], for the routes that read it so: w's storage, or for a filter the
// NHWC route keeps channels-last, a rearranged copy in `keep` for this call.
const void* CudaDeviceOps::pytorch_filter(const Tensor& w, Tensor& keep) const {
    const auto* f = backend_.channels_last(w.device_data());
    if (!f) return w.device_data();
    keep = Tensor::empty_on(backend_, w.shape(), w.dtype());
    filter_to_krsc(w.device_data(), keep.device_data(), w.dtype(), f->cout, f->taps, f->cin, backend_.stream());
    return keep.device_data();
}

ConvShape CudaDeviceOps::conv_shape(int64_t n, int64_t cin, int64_t h, int64_t w, const Tensor& weight, int stride,
                                    int padding, DType type) const {
    const int64_t k = weight.dim(2);
    return {n, cin, h, w, weight.dim(0), k, stride, padding, (h + 2 * padding - k) / stride + 1,
            (w + 2 * padding - k) / stride + 1, type, backend_.fast_float32()};
}

CudaDeviceOps::RouteKey CudaDeviceOps::route_key(const ConvShape& sh, bool fused_norm) {
    return {sh.n, sh.cin, sh.h, sh.w, sh.cout, sh.k, sh.stride, sh.padding, int(sh.type), sh.tf32, fused_norm};
}

bool CudaDeviceOps::on_nhwc_route(const ConvShape& sh, bool fused_norm) const {
    const auto it = routes_.find(route_key(sh, fused_norm));
    return it != routes_.end() && it->second == ConvRoute::CudnnNhwc;
}

void CudaDeviceOps::conv2d_group_norm_silu_add_(Tensor& y, const Tensor& x, int groups, const Tensor& gamma,
                                                const Tensor& beta, float eps, const Tensor& w, const Tensor* b,
                                                int stride, int padding, const Tensor* y_bias) const {
    Timed timed(backend_, ops::OpKind::GroupNorm);
    const Tensor stats = stats_for_conv("conv2d_group_norm_silu_add_", x, groups, gamma, beta, eps);
    if (y_bias) same_place("conv2d_group_norm_silu_add_", y, *y_bias, "y_bias");
    conv(x, w, b, stride, padding, &stats, &gamma, &beta, groups, {false, &y, nullptr, 0, y_bias});
}

Tensor CudaDeviceOps::conv2d_upsample2x(const Tensor& x, const Tensor& w, const Tensor* b, int stride,
                                        int padding) const {
    return conv(x, w, b, stride, padding, nullptr, nullptr, nullptr, 0, {true, nullptr, nullptr, 0, nullptr});
}

void CudaDeviceOps::conv_im2col(const ConvCall& c, Tensor& y) const {
    const ConvShape& sh = c.shape;
    const Tensor& x = c.x;
    cudaStream_t s = backend_.stream();
    const int64_t pixels = sh.oh * sh.ow, kc = sh.cin * sh.k * sh.k;
    const bool direct = sh.k == 1 && sh.stride == 1 && sh.padding == 0 && !c.stats;  // x is its own column matrix
    const int64_t tile =
        direct ? pixels : std::clamp<int64_t>(scratch_budget(kColumnBudgetBytes, backend_.memory_limit(), 8) /
                                               std::max<int64_t>(1, kc * esize(x)),
                                           1, pixels);
    Tensor col, wn;
    if (!direct) col = Tensor::empty_on(backend_, {kc * tile}, x.dtype());
    const void* filter = pytorch_filter(c.w, wn);
    // y_img [cout, pixels] row-major = col^T x w^T column-major: m = pixels of the tile, n = cout.
    GemmArgs g;
    g.n = sh.cout, g.k = kc;
    g.b = filter, g.ldb = kc;
    g.ldc = pixels;
    g.ab_type = g.c_type = x.dtype();
    g.tf32 = sh.tf32;
    if (direct && sh.n > 1) {
        // A 1x1 convolution of every image as one batched product (the filter shared: batch stride 0), not a
        // product per image (the UNet's shortcuts).
        g.m = pixels;
        g.a = x.device_data(), g.lda = pixels;
        g.c = y.device_data();
        g.batch = int(sh.n);
        g.stride_a = sh.cin * pixels, g.stride_b = 0, g.stride_c = sh.cout * pixels;
        backend_.gemm().run(g, s);
    } else {
        for (int64_t img = 0; img < sh.n; ++img) {
            const char* x_img = at(x, img * sh.cin * sh.h * sh.w);
            char* y_img = at(y, img * sh.cout * pixels);
            for (int64_t first = 0; first < pixels; first += tile) {
                const int64_t count = std::min(tile, pixels - first);
                g.a = x_img, g.lda = pixels;
                if (!direct) {
                    const Im2colNorm norm = c.stats ? fused_norm(c, img) : Im2colNorm{};
                    im2col(x_img, col.device_data(), x.dtype(), sh.cin, sh.h, sh.w, int(sh.k), int(sh.stride),
                           int(sh.padding), sh.oh, sh.ow, first, count, c.stats ? &norm : nullptr, s);
                    g.a = col.device_data(), g.lda = count;
                }
                g.m = count;
                g.c = y_img + first * esize(y);
                backend_.gemm().run(g, s);
            }
        }
    }
    if (c.b) add_channel_bias(y.device_data(), c.b->device_data(), y.dtype(), sh.n, sh.cout, pixels, s, true);
}

Tensor CudaDeviceOps::conv2d(const Tensor& x, const Tensor& w, const Tensor* b, int stride, int padding) const {
    return conv(x, w, b, stride, padding, nullptr, nullptr, nullptr, 0);
}

void CudaDeviceOps::stats_of_groups(const Tensor& x, int64_t n, int64_t c, int64_t hw, int groups, float eps,
                                    Tensor& stats) const {
    // Large groups are reduced in chunks by many blocks, through a workspace from the backend's pool.
    Tensor workspace;
    float* ws = nullptr;
    if (const int64_t floats = group_norm_stats_workspace(n, c, hw, groups); floats > 0) {
        workspace = Tensor::empty_on(backend_, {floats}, DType::F32);
        ws = static_cast<float*>(workspace.device_data());
    }
    group_norm_stats(x.device_data(), x.dtype(), n, c, hw, groups, eps, static_cast<float*>(stats.device_data()),
                     backend_.stream(), ws);
}

// The group statistics of x for a convolution that normalises (and SiLUs) its input: [n, groups, 2] floats.
Tensor CudaDeviceOps::stats_for_conv(const char* op, const Tensor& x, int groups, const Tensor& gamma,
                                     const Tensor& beta, float eps) const {
    if (x.rank() != 4 || groups < 1 || x.dim(1) % groups || gamma.numel() != x.dim(1) || beta.numel() != x.dim(1))
        bad(op, desc("x", x) + " with " + std::to_string(groups) + " groups, " + desc("gamma", gamma) + ", " +
                    desc("beta", beta));
    same_place(op, x, gamma, "gamma");
    same_place(op, x, beta, "beta");
    Tensor stats = Tensor::empty_on(backend_, {x.dim(0), groups, 2}, DType::F32);
    stats_of_groups(x, x.dim(0), x.dim(1), x.dim(2) * x.dim(3), groups, eps, stats);
    return stats;
}

Tensor CudaDeviceOps::conv2d_group_norm_silu(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                                             float eps, const Tensor& w, const Tensor* b, int stride,
                                             int padding) const {
    Timed timed(backend_, ops::OpKind::GroupNorm);
    const Tensor stats = stats_for_conv("conv2d_group_norm_silu", x, groups, gamma, beta, eps);
    return conv(x, w, b, stride, padding, &stats, &gamma, &beta, groups);
}

Tensor CudaDeviceOps::conv2d_group_norm_silu_plus(const Tensor& x, int groups, const Tensor& gamma,
                                                  const Tensor& beta, float eps, const Tensor& w, const Tensor* b,
                                                  const Tensor& image_bias, int64_t at, int stride,
                                                  int padding) const {
    Timed timed(backend_, ops::OpKind::GroupNorm);
    const Tensor stats = stats_for_conv("conv2d_group_norm_silu_plus", x, groups, gamma, beta, eps);
    return conv(x, w, b, stride, padding, &stats, &gamma, &beta, groups, {false, nullptr, &image_bias, at, nullptr});
}

Tensor CudaDeviceOps::group_norm(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                                 float eps) const {
    if (x.rank() < 2 || groups < 1 || x.dim(1) % groups || gamma.numel() != x.dim(1) || beta.numel() != x.dim(1))
        bad("group_norm", desc("x", x) + " with " + std::to_string(groups) + " groups");
    same_place("group_norm", x, gamma, "gamma");
    same_place("group_norm", x, beta, "beta");
    const int64_t n = x.dim(0), c = x.dim(1), inner = c ? x.numel() / (n * c) : 0;
    Tensor y = Tensor::empty_on(backend_, x.shape(), x.dtype());
    if (y.numel() == 0) return y;
    Timed timed(backend_, ops::OpKind::GroupNorm);
    Tensor stats = Tensor::empty_on(backend_, {n, groups, 2}, DType::F32);
    float* st = static_cast<float*>(stats.device_data());
    stats_of_groups(x, n, c, inner, groups, eps, stats);
    group_norm_apply(x.device_data(), st, gamma.device_data(), beta.device_data(), y.device_data(), x.dtype(), n, c,
                     inner, groups, false, backend_.stream());
    return y;
}

Tensor CudaDeviceOps::layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps) const {
    if (x.rank() < 1 || gamma.numel() != x.dim(-1) || beta.numel() != x.dim(-1))
        bad("layer_norm", desc("x", x) + ", " + desc("gamma", gamma));
    same_place("layer_norm", x, gamma, "gamma");
    same_place("layer_norm", x, beta, "beta");
    Tensor y = Tensor::empty_on(backend_, x.shape(), x.dtype());
    if (y.numel() == 0) return y;
    Timed timed(backend_, ops::OpKind::LayerNorm);
    const int64_t cols = x.dim(-1);
    cuda::layer_norm(x.device_data(), gamma.device_data(), beta.device_data(), y.device_data(), x.dtype(), x.numel() / cols,
               cols, eps, backend_.stream());
    return y;
}

Tensor CudaDeviceOps::attention(const Tensor& q, const Tensor& k, const Tensor& v, int heads, bool causal) const {
    if (q.rank() != 3 || k.rank() != 3 || v.shape() != k.shape() || q.dim(0) != k.dim(0) || q.dim(2) != k.dim(2) ||
        heads < 1 || q.dim(2) % heads)
        bad("attention", desc("q", q) + ", " + desc("k", k) + ", " + desc("v", v) + ", " + std::to_string(heads) +
                             " heads");
    same_place("attention", q, k, "k");
    same_place("attention", q, v, "v");
    if (flash_fits(q.dtype(), q.dim(2), heads, k.dim(1)))
        return flash(q.dtype(), q.device_data(), k.device_data(), v.device_data(), q.dim(0), q.dim(1), k.dim(1),
                     q.dim(2), heads, causal, {});
    Timed timed(backend_, ops::OpKind::Attention,
                4.0 * double(q.dim(0)) * double(q.dim(1)) * double(k.dim(1)) * double(q.dim(2)));
    return attention_by_products(q, k, v, heads, causal);
}

// Whether the flash kernel takes these: fp16, head dims up to 256 (width c over heads), keys to attend to, on a
// device where it runs at that head dim (arch_paths.h: 8.0, and its shared memory; cuDNN's attention needs 8.0
// too). Elsewhere attention is products: before 8.0, and for D = 160 on the 99 KiB of 8.6 and 8.9.
bool CudaDeviceOps::flash_fits(DType type, int64_t c, int heads, int64_t lk) const {
    return type == DType::F16 && heads >= 1 && c % heads == 0 && c / heads <= 256 && lk >= 1 &&
           flash_attention_runs(int(c / heads), backend_.arch());
}

// The flash kernel, or cuDNN's fused attention where it won this shape's first call (non-causal only), on
// q [b, lq, c] and k, v [b, lk, c] at their pointers, rows `strides` apart (0: c), into a new [b, lq, c].
Tensor CudaDeviceOps::flash(DType type, const void* q, const void* k, const void* v, int64_t b, int64_t lq,
                            int64_t lk, int64_t c, int heads, bool causal, AttentionStrides strides) const {
    Timed timed(backend_, ops::OpKind::Attention, 4.0 * double(b) * double(lq) * double(lk) * double(c));
    Tensor out = Tensor::empty_on(backend_, {b, lq, c}, type);
    if (out.numel() == 0) return out;
    cudaStream_t s = backend_.stream();
    auto flash_kernel = [&] {
        cuda_attention_f16(static_cast<const __half*>(q), static_cast<const __half*>(k),
                           static_cast<const __half*>(v), static_cast<__half*>(out.device_data()), int(b), int(lq),
                           int(lk), heads, int(c / heads), s, causal, strides);
    };
    CudnnAttention* cudnn = causal ? nullptr : backend_.cudnn_attention();
    const CudnnAttentionShape shape{b, lq, lk, heads, c / heads, strides.q ? strides.q : c, strides.kv ? strides.kv : c};
    // Pointers and strides cuDNN cannot take: the flash kernel, and nothing remembered (the next call may fit).
    if (!cudnn || !CudnnAttention::takes(shape, q, k, v, out.device_data())) {
        flash_kernel();
        return out;
    }
    std::vector<Tensor> scratch;  // cuDNN's workspace, alive until the call is queued; the stream orders its reuse
    auto try_cudnn = [&] { return cudnn->run(shape, q, k, v, out.device_data(), s, scratch_in(scratch)); };
    if (auto it = attention_on_cudnn_.find(shape); it != attention_on_cudnn_.end()) {
        if (!(it->second && try_cudnn())) flash_kernel();
        return out;
    }
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    KILN_CUDA_CHECK(cudaStreamIsCapturing(s, &capturing));
    if (capturing != cudaStreamCaptureStatusNone) {  // no timing inside a recording
        flash_kernel();
        return out;
    }
    // The shape's first call: cuDNN chooses its engine (if it has one); then each route runs between events.
    // Running out of memory for cuDNN's trial workspaces leaves the shape to the flash kernel, which needs none.
    bool use_cudnn = false;
    std::string log;
    try {
        use_cudnn = try_cudnn();
        if (!use_cudnn) log = " cuDNN: " + cudnn->last_refusal();
    } catch (const Error& e) {
        if (e.kind() != ErrorKind::OutOfMemory) throw;
        log = " cuDNN: out of memory for its workspace";
    }
    if (use_cudnn && backend_.attention_measured()) {
        constexpr int kRuns = 3;
        EventTimer timer;
        // As the routes run in a recorded call (cuDNN's memsets cost most there).
        const float cudnn_ms = timer.graph_mean_ms(s, kRuns, try_cudnn);
        flash_kernel();  // its first launch may load the module: not timed, as cuDNN's first run is not
        const float kernel_ms = timer.graph_mean_ms(s, kRuns, flash_kernel);
        use_cudnn = cudnn_ms < kernel_ms;
        if (use_cudnn) try_cudnn();  // out holds the kernel's result: keep cuDNN's
        log = " cudnn " + std::to_string(cudnn_ms * 1000.0f).substr(0, 7) + " us, flash " +
              std::to_string(kernel_ms * 1000.0f).substr(0, 7) + " us";
    } else if (!use_cudnn) {
        flash_kernel();
    }
    attention_on_cudnn_[shape] = use_cudnn;
    if (backend_.conv_log())
        std::fprintf(stderr, "kiln: attention %lldx%lldx%lld, %d heads of %lld, strides %lld/%lld:%s -> %s\n",
                     (long long)b, (long long)lq, (long long)lk, heads, (long long)(c / heads),
                     (long long)shape.q_stride, (long long)shape.kv_stride, log.c_str(), use_cudnn ? "cudnn" : "flash");
    return out;
}

// The flash kernel reads q, k and v where one product put them side by side (token strides 3C, or 2C for k | v);
// other dtypes and head dims split them off first (DeviceOps's composition).
Tensor CudaDeviceOps::attention_qkv(const Tensor& qkv, int heads) const {
    const int64_t c = qkv.dim(2) / 3;
    if (!flash_fits(qkv.dtype(), c, heads, qkv.dim(1))) return DeviceOps::attention_qkv(qkv, heads);
    return flash(qkv.dtype(), qkv.device_data(), at(qkv, c), at(qkv, 2 * c), qkv.dim(0), qkv.dim(1), qkv.dim(1), c,
                 heads, false, {3 * c, 3 * c});
}

Tensor CudaDeviceOps::attention_kv(const Tensor& q, const Tensor& kv, int heads, int64_t column) const {
    same_place("attention_kv", q, kv, "kv");
    const int64_t c = q.dim(2);
    if (q.dim(0) != kv.dim(0) || !flash_fits(q.dtype(), c, heads, kv.dim(1)))
        return DeviceOps::attention_kv(q, kv, heads, column);
    return flash(q.dtype(), q.device_data(), at(kv, column), at(kv, column + c), q.dim(0), q.dim(1), kv.dim(1), c,
                 heads, false, {0, kv.dim(2)});
}

Tensor CudaDeviceOps::columns(const Tensor& x, int64_t begin, int64_t count) const {
    Shape shape = x.shape();
    const int64_t width = shape.back(), es = esize(x);
    shape.back() = count;
    Tensor y = Tensor::empty_on(backend_, shape, x.dtype());
    if (y.numel() == 0) return y;
    KILN_CUDA_CHECK(cudaMemcpy2DAsync(y.device_data(), size_t(count * es), at(x, begin), size_t(width * es),
                                      size_t(count * es), size_t(x.numel() / width), cudaMemcpyDeviceToDevice,
                                      backend_.stream()));
    return y;
}

// softmax(q k^T / sqrt(D)) v per (batch, head) in blocks of query rows: scores in float32, probabilities
// rounded to the operands' dtype before the second product (as the flash kernel does).
Tensor CudaDeviceOps::attention_by_products(const Tensor& q, const Tensor& k, const Tensor& v, int heads,
                                            bool causal) const {
    const int64_t batch = q.dim(0), lq = q.dim(1), lk = k.dim(1), hd = q.dim(2), d = hd / heads;
    Tensor out = Tensor::empty_on(backend_, q.shape(), q.dtype());
    if (out.numel() == 0) return out;
    if (lk == 0) bad("attention", "no keys");
    cudaStream_t s = backend_.stream();
    // Scores in float32, probabilities stored straight in the operands' type by the softmax.
    const int64_t per_row = heads * lk * (4 + esize(q));
    const int64_t block = std::clamp<int64_t>(scratch_budget(kScoreBudgetBytes, backend_.memory_limit(), 8) / per_row, 1, lq);
    Tensor scores = Tensor::empty_on(backend_, {heads * block * lk}, DType::F32);
    Tensor probs = Tensor::empty_on(backend_, {heads * block * lk}, q.dtype());
    for (int64_t bi = 0; bi < batch; ++bi)
        for (int64_t q0 = 0; q0 < lq; q0 += block) {
            const int64_t rows = std::min(block, lq - q0);
            GemmArgs g;  // scores^T (lk x rows, column-major) = k_h q_h^T, per head
            g.trans_a = true;
            g.m = lk, g.n = rows, g.k = d;
            g.a = at(k, bi * lk * hd), g.lda = hd;
            g.b = at(q, (bi * lq + q0) * hd), g.ldb = hd;
            g.c = scores.device_data(), g.ldc = lk;
            g.ab_type = q.dtype(), g.c_type = DType::F32;
            g.tf32 = backend_.fast_float32();
            g.alpha = 1.0f / std::sqrt(static_cast<float>(d));
            g.batch = heads, g.stride_a = d, g.stride_b = d, g.stride_c = rows * lk;
            backend_.gemm().run(g, s);
            if (causal) causal_mask(static_cast<float*>(scores.device_data()), heads, rows, lk, q0, s);
            softmax_f32_rows_to(static_cast<const float*>(scores.device_data()), probs.device_data(), q.dtype(),
                                heads * rows, lk, s);
            GemmArgs o;  // out_h^T (d x rows) = v_h^T p_h^T
            o.m = d, o.n = rows, o.k = lk;
            o.a = at(v, bi * lk * hd), o.lda = hd;
            o.b = probs.device_data(), o.ldb = lk;
            o.c = at(out, (bi * lq + q0) * hd), o.ldc = hd;
            o.ab_type = o.c_type = q.dtype();
            o.tf32 = backend_.fast_float32();
            o.batch = heads, o.stride_a = d, o.stride_b = rows * lk, o.stride_c = d;
            backend_.gemm().run(o, s);
        }
    return out;
}

void CudaDeviceOps::activation_(Tensor& x, ops::DeviceActivation f) const {
    Timed timed(backend_, ops::OpKind::Silu);
    static constexpr Activation kinds[] = {Activation::Silu, Activation::Gelu, Activation::GeluTanh,
                                           Activation::QuickGelu};
    activation(x.device_data(), x.dtype(), x.numel(), kinds[static_cast<int>(f)], backend_.stream());
}

Tensor CudaDeviceOps::geglu(const Tensor& x) const {
    if (x.rank() < 1 || x.dim(-1) % 2) bad("geglu", desc("x", x) + ": the last dim must be even");
    Shape shape = x.shape();
    shape.back() /= 2;
    Tensor y = Tensor::empty_on(backend_, shape, x.dtype());
    if (y.numel() == 0) return y;
    Timed timed(backend_, ops::OpKind::Geglu);
    const int64_t half = y.dim(-1);
    cuda::geglu(x.device_data(), y.device_data(), x.dtype(), y.numel() / half, half, backend_.stream());
    return y;
}

Tensor CudaDeviceOps::upsample_nearest2x(const Tensor& x) const {
    if (x.rank() != 4) bad("upsample_nearest2x", desc("x", x) + " must be [N, C, H, W]");
    Tensor y = Tensor::empty_on(backend_, {x.dim(0), x.dim(1), 2 * x.dim(2), 2 * x.dim(3)}, x.dtype());
    if (y.numel() == 0) return y;
    Timed timed(backend_, ops::OpKind::UpsampleNearest2x);
    cuda::upsample_nearest2x(x.device_data(), y.device_data(), x.dtype(), x.dim(0) * x.dim(1), x.dim(2), x.dim(3),
                             backend_.stream());
    return y;
}

Tensor CudaDeviceOps::concat_channels(const Tensor& a, const Tensor& b) const {
    same_place("concat_channels", a, b, "b");
    Shape shape = a.shape();
    shape[1] += b.dim(1);
    Tensor y = Tensor::empty_on(backend_, shape, a.dtype());
    if (y.numel() == 0) return y;
    Timed timed(backend_, ops::OpKind::ConcatChannels);
    const int64_t n = a.dim(0), inner = y.numel() / (n * shape[1]);
    cuda::concat_channels(a.device_data(), b.device_data(), y.device_data(), a.dtype(), n, a.dim(1), b.dim(1), inner,
                          backend_.stream());
    return y;
}

void CudaDeviceOps::add_(Tensor& a, const Tensor& b) const {
    same_place("add_", a, b, "b");
    Timed timed(backend_, ops::OpKind::Add);
    add(a.device_data(), b.device_data(), a.dtype(), a.numel(), backend_.stream());
}

void CudaDeviceOps::add_channel_bias_(Tensor& x, const Tensor& bias_nc) const {
    same_place("add_channel_bias_", x, bias_nc, "bias");
    const int64_t planes = x.dim(0) * x.dim(1);
    if (planes == 0) return;
    Timed timed(backend_, ops::OpKind::AddChannelBias);
    add_channel_bias(x.device_data(), bias_nc.device_data(), x.dtype(), x.dim(0), x.dim(1), x.numel() / planes,
                     backend_.stream());
}

void CudaDeviceOps::add_channel_sums(const Tensor& x, int64_t row, int64_t rows, std::vector<double>& sum,
                                     std::vector<double>& sum_sq) const {
    const int64_t c = x.dim(1), plane = x.dim(2) * x.dim(3), w = x.dim(3);
    Tensor sums = Tensor::empty_on(backend_, {4 * c}, DType::F32);  // 2c doubles
    const char* base = static_cast<const char*>(x.device_data()) + row * w * int64_t(dtype_size(x.dtype()));
    plane_sums(base, x.dtype(), c, plane, rows * w, static_cast<double*>(sums.device_data()), backend_.stream());
    std::vector<double> host(2 * c);
    backend_.download(host.data(), sums.device_data(), 2 * c * int64_t(sizeof(double)));
    for (int64_t ch = 0; ch < c; ++ch) {
        sum[ch] += host[2 * ch];
        sum_sq[ch] += host[2 * ch + 1];
    }
}

void CudaDeviceOps::scale_(Tensor& x, float s) const { scale(x.device_data(), x.dtype(), x.numel(), s, backend_.stream()); }

Tensor CudaDeviceOps::nchw_to_nlc(const Tensor& x) const {
    const int64_t n = x.dim(0), c = x.dim(1), l = x.dim(2) * x.dim(3);
    Tensor y = Tensor::empty_on(backend_, {n, l, c}, x.dtype());
    Timed timed(backend_, ops::OpKind::NchwToNlc);
    if (y.numel()) cuda::nchw_to_nlc(x.device_data(), y.device_data(), x.dtype(), n, c, l, backend_.stream());
    return y;
}

Tensor CudaDeviceOps::nlc_to_nchw(const Tensor& x, int64_t h, int64_t w) const {
    const int64_t n = x.dim(0), c = x.dim(2);
    Tensor y = Tensor::empty_on(backend_, {n, c, h, w}, x.dtype());
    Timed timed(backend_, ops::OpKind::NlcToNchw);
    if (y.numel()) cuda::nlc_to_nchw(x.device_data(), y.device_data(), x.dtype(), n, h * w, c, backend_.stream());
    return y;
}

// GroupNorm applied as the values move into [n, hw, c]: the channels-last transpose's fused norm without SiLU.
Tensor CudaDeviceOps::group_norm_to_nlc(const Tensor& x, int groups, const Tensor& gamma, const Tensor& beta,
                                        float eps) const {
    Timed timed(backend_, ops::OpKind::GroupNorm);
    const Tensor stats = stats_for_conv("group_norm_to_nlc", x, groups, gamma, beta, eps);  // checks the operands
    const int64_t n = x.dim(0), c = x.dim(1), hw = x.dim(2) * x.dim(3);
    Tensor y = Tensor::empty_on(backend_, {n, hw, c}, x.dtype());
    if (y.numel() == 0) return y;
    Im2colNorm norm = group_norm_terms(stats, gamma, beta, groups);
    norm.silu = false;
    to_nhwc(x.device_data(), y.device_data(), x.dtype(), n, c, hw, &norm, backend_.stream());
    return y;
}

void CudaDeviceOps::add_nlc_(Tensor& y, const Tensor& tokens) const {
    same_place("add_nlc_", y, tokens, "tokens");
    if (y.numel() == 0) return;
    Timed timed(backend_, ops::OpKind::NlcToNchw);
    from_nhwc(tokens.device_data(), nullptr, y.device_data(), y.dtype(), y.dim(0), y.dim(2) * y.dim(3), y.dim(1),
              backend_.stream(), true);
}

Tensor CudaDeviceOps::softmax_lastdim(const Tensor& x) const {
    Tensor y = Tensor::empty_on(backend_, x.shape(), x.dtype());
    if (y.numel() == 0) return y;
    const int64_t cols = x.dim(-1);
    cuda::softmax_lastdim(x.device_data(), y.device_data(), x.dtype(), x.numel() / cols, cols, backend_.stream());
    return y;
}

Tensor CudaDeviceOps::timestep_embedding(const Tensor& timesteps, int dim, bool flip_sin_to_cos,
                                         float downscale_freq_shift, float max_period, DType out_type) const {
    if (timesteps.dtype() != DType::F32) bad("timestep_embedding", desc("timesteps", timesteps) + " must be float32");
    require(max_period == 10000.0f, ErrorKind::Unsupported,
            "ops::timestep_embedding (cuda): max_period other than 10000");
    require(dim >= 1, ErrorKind::InvalidArgument, "ops::timestep_embedding: dim must be >= 1");
    Tensor y = Tensor::empty_on(backend_, {timesteps.numel(), dim}, out_type);
    if (y.numel())
        cuda::timestep_embedding(static_cast<const float*>(timesteps.device_data()), y.device_data(), out_type,
                                 timesteps.numel(), dim, flip_sin_to_cos, downscale_freq_shift, backend_.stream());
    return y;
}

}  // namespace kiln::cuda
