// kiln_cuda_attention_bench: times the shipped CUDA attention kernel (cuda_attention_f16) on Stable
// Diffusion's attention shapes. Per shape: warm-up runs, then a spin kernel holds the GPU while the host
// queues every timed run between CUDA events, so the intervals are GPU time only (no launch gaps); the
// median interval and 4*B*H*Lq*Lk*D / median as TFLOP/s are printed. Where kiln has cuDNN's fused attention
// (cudnn_attention.h) it is timed too, on separate q, k, v and on q | k | v packed in one buffer (the UNet's
// self-attention layout; the flash kernel is timed on that layout as well). scripts/bench_torch_sdpa.py times
// PyTorch's scaled_dot_product_attention the same way and checks the --dump files against it.
//
//   kiln_cuda_attention_bench [--runs N] [--warmup N] [--sweep | --config I] [--shape NAME] [--csv FILE]
//                             [--dump DIR]
//   --sweep  time every compiled tile configuration, not only the one cuda_attention_f16 chooses
//   --config time configuration I only (with --shape: one kernel, e.g. under ncu)
//   --dump   write B,Lq,Lk,H,D,causal and q, k, v, out (fp16) of each shape to DIR/<shape>.bin
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/attention.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cudnn_attention.h"
#include "backends/cuda/device_info.h"
#include "core/half.h"
#include "kiln/error.h"

namespace {

using kiln::cuda::detail::AttentionConfig;

struct Shape {
    const char* name;
    int B, H, Lq, Lk, D;
};

// SD 1.5 at 512x512 with classifier-free guidance (B = 2): the UNet's four attention widths; SDXL at
// 1024x1024: 64 wide heads at 64x64 and 32x32 latents (SDXL has 20 heads at 32x32; both are listed).
const Shape kShapes[] = {
    {"sd15_self_l4096_d40", 2, 8, 4096, 4096, 40},
    {"sd15_cross_l4096x77_d40", 2, 8, 4096, 77, 40},
    {"sd15_self_l1024_d80", 2, 8, 1024, 1024, 80},
    {"sd15_self_l256_d160", 2, 8, 256, 256, 160},
    {"sdxl_self_l4096_h10_d64", 2, 10, 4096, 4096, 64},
    {"sdxl_self_l1024_h10_d64", 2, 10, 1024, 1024, 64},
    {"sdxl_self_l1024_h20_d64", 2, 20, 1024, 1024, 64},
};

__global__ void spin(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

struct DeviceBuffer {
    void* p = nullptr;
    explicit DeviceBuffer(size_t bytes) { KILN_CUDA_CHECK(cudaMalloc(&p, bytes)); }
    ~DeviceBuffer() { cudaFree(p); }
    __half* h() const { return static_cast<__half*>(p); }
};

std::vector<uint16_t> random_half(size_t n, uint64_t seed) {
    std::vector<uint16_t> out(n);
    uint64_t s = seed;
    for (auto& x : out) {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        x = kiln::float_to_half(static_cast<float>(double(z >> 11) / double(1ull << 52) - 1.0));  // [-1, 1)
    }
    return out;
}

struct Timing {
    double median_ms, min_ms;
};

Timing time_runs(const std::function<void()>& once, int warmup, int runs) {
    for (int i = 0; i < warmup; ++i) once();
    KILN_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<cudaEvent_t> ev(runs + 1);
    for (auto& e : ev) KILN_CUDA_CHECK(cudaEventCreate(&e));
    spin<<<1, 1>>>(40'000'000);  // ~20 ms at ~2 GHz: longer than queueing the runs takes
    KILN_CUDA_CHECK(cudaGetLastError());
    KILN_CUDA_CHECK(cudaEventRecord(ev[0]));
    for (int i = 0; i < runs; ++i) {
        once();
        KILN_CUDA_CHECK(cudaEventRecord(ev[i + 1]));
    }
    KILN_CUDA_CHECK(cudaEventSynchronize(ev[runs]));
    std::vector<double> ms(runs);
    for (int i = 0; i < runs; ++i) {
        float t = 0;
        KILN_CUDA_CHECK(cudaEventElapsedTime(&t, ev[i], ev[i + 1]));
        ms[i] = t;
    }
    for (auto& e : ev) cudaEventDestroy(e);
    std::sort(ms.begin(), ms.end());
    const double median = runs % 2 ? ms[runs / 2] : 0.5 * (ms[runs / 2 - 1] + ms[runs / 2]);
    return {median, ms.front()};
}

void dump(const std::string& dir, const Shape& s, const std::vector<uint16_t>& qh, const std::vector<uint16_t>& kh,
          const std::vector<uint16_t>& vh, const DeviceBuffer& o) {
    std::vector<uint16_t> out(qh.size());
    KILN_CUDA_CHECK(cudaMemcpy(out.data(), o.p, out.size() * 2, cudaMemcpyDeviceToHost));
    const std::string path = dir + "/" + s.name + ".bin";
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) throw kiln::Error(kiln::ErrorKind::IO, "cannot write " + path);
    const int32_t header[6] = {s.B, s.Lq, s.Lk, s.H, s.D, 0};
    bool ok = std::fwrite("KILNATT1", 1, 8, f) == 8 && std::fwrite(header, 4, 6, f) == 6;
    const std::vector<uint16_t>* arrays[] = {&qh, &kh, &vh, &out};
    for (const auto* a : arrays) ok = ok && std::fwrite(a->data(), 2, a->size(), f) == a->size();
    ok = std::fclose(f) == 0 && ok;
    if (!ok) throw kiln::Error(kiln::ErrorKind::IO, "short write to " + path);
}

int run(int argc, char** argv) {
    int runs = 30, warmup = 10;
    bool sweep = false;
    int only_config = -1;
    std::string csv_path, dump_dir, only_shape;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw kiln::Error(kiln::ErrorKind::InvalidArgument, a + " needs a value");
            return argv[++i];
        };
        if (a == "--runs") runs = std::atoi(value().c_str());
        else if (a == "--warmup") warmup = std::atoi(value().c_str());
        else if (a == "--sweep") sweep = true;
        else if (a == "--config") only_config = std::atoi(value().c_str());
        else if (a == "--shape") only_shape = value();
        else if (a == "--csv") csv_path = value();
        else if (a == "--dump") dump_dir = value();
        else throw kiln::Error(kiln::ErrorKind::InvalidArgument, "unknown argument " + a);
    }
    if (runs < 20) throw kiln::Error(kiln::ErrorKind::InvalidArgument, "--runs must be at least 20");

    std::string why;
    const auto devices = kiln::cuda::cuda_devices(&why);
    if (devices.empty()) {
        std::fprintf(stderr, "no CUDA GPU: %s\n", why.c_str());
        return 2;
    }
    int current = 0;
    KILN_CUDA_CHECK(cudaGetDevice(&current));
    const auto& dev = devices[current];
    std::printf("device %d: %s (cc %d.%d, %d SMs); median of %d runs after %d warm-up\n", current, dev.name.c_str(),
                dev.cc_major, dev.cc_minor, dev.multiprocessors, runs, warmup);
    FILE* csv = csv_path.empty() ? nullptr : std::fopen(csv_path.c_str(), "w");
    if (!csv_path.empty() && !csv) throw kiln::Error(kiln::ErrorKind::IO, "cannot write " + csv_path);
    if (csv)
        std::fprintf(csv, "shape,B,H,Lq,Lk,D,config,chosen,block_rows,warps,block_keys,stages,q_regs,median_ms,min_ms,"
                          "tflops\n");
    std::printf("%-26s %2s %3s %6s %6s %4s  %-24s %10s %10s %8s\n", "shape", "B", "H", "Lq", "Lk", "D", "config",
                "median ms", "min ms", "TFLOP/s");

    // cuDNN's fused attention where kiln was built with cuDNN 9.13 or later (the backend's other route).
    std::unique_ptr<kiln::cuda::CudnnAttention> cudnn;
    std::unique_ptr<DeviceBuffer> scratch;  // one workspace, grown to the largest asked for (no allocation per run)
    size_t scratch_bytes = 0;
    auto workspace = [&](size_t bytes) {
        if (bytes > scratch_bytes) {
            KILN_CUDA_CHECK(cudaDeviceSynchronize());  // queued runs may still use the old one
            scratch = std::make_unique<DeviceBuffer>(bytes);
            scratch_bytes = bytes;
        }
        return scratch->p;
    };
    try {
        cudnn = std::make_unique<kiln::cuda::CudnnAttention>();
        std::printf("cuDNN %lld\n", (long long)kiln::cuda::CudnnAttention::version());
    } catch (const kiln::Error& e) {
        std::printf("no cuDNN attention: %s\n", e.what());
    }

    uint64_t seed = 1;
    for (const Shape& s : kShapes) {
        if (!only_shape.empty() && only_shape != s.name) continue;
        const size_t nq = size_t(s.B) * s.Lq * s.H * s.D, nk = size_t(s.B) * s.Lk * s.H * s.D;
        const auto qh = random_half(nq, seed++), kh = random_half(nk, seed++), vh = random_half(nk, seed++);
        DeviceBuffer q(nq * 2), k(nk * 2), v(nk * 2), o(nq * 2);
        KILN_CUDA_CHECK(cudaMemcpy(q.p, qh.data(), nq * 2, cudaMemcpyHostToDevice));
        KILN_CUDA_CHECK(cudaMemcpy(k.p, kh.data(), nk * 2, cudaMemcpyHostToDevice));
        KILN_CUDA_CHECK(cudaMemcpy(v.p, vh.data(), nk * 2, cudaMemcpyHostToDevice));
        KILN_CUDA_CHECK(cudaMemset(o.p, 0xFF, nq * 2));  // NaN: an unwritten output shows in the check
        const double flops = 4.0 * s.B * s.H * double(s.Lq) * s.Lk * s.D;
        const std::vector<AttentionConfig> configs = kiln::cuda::detail::attention_configs(s.D);
        const int chosen = kiln::cuda::detail::choose_attention_config(s.D, s.B, s.Lq, s.H, dev.multiprocessors);
        for (int c = 0; c < int(configs.size()); ++c) {
            if (only_config >= 0 ? c != only_config : !sweep && c != chosen) continue;
            const Timing t = time_runs(
                [&] {
                    kiln::cuda::detail::cuda_attention_f16_config(q.h(), k.h(), v.h(), o.h(), s.B, s.Lq, s.Lk, s.H,
                                                                  s.D, nullptr, false, c);
                },
                warmup, runs);
            const double tflops = flops / (t.median_ms * 1e-3) / 1e12;
            char cfg[64];
            std::snprintf(cfg, sizeof cfg, "%s%d:%dr/%dw/%dk/%ds/%s", c == chosen ? "*" : " ", c, configs[c].block_rows,
                          configs[c].warps, configs[c].block_keys, configs[c].stages,
                          configs[c].q_in_registers ? "qreg" : "qsmem");
            std::printf("%-26s %2d %3d %6d %6d %4d  %-24s %10.4f %10.4f %8.1f\n", s.name, s.B, s.H, s.Lq, s.Lk, s.D,
                        cfg, t.median_ms, t.min_ms, tflops);
            if (csv)
                std::fprintf(csv, "%s,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%.6f,%.6f,%.3f\n", s.name, s.B, s.H, s.Lq,
                             s.Lk, s.D, c, int(c == chosen), configs[c].block_rows, configs[c].warps, configs[c].block_keys, configs[c].stages,
                             int(configs[c].q_in_registers), t.median_ms, t.min_ms, tflops);
        }
        if (cudnn) {  // cuDNN's fused attention on the same buffers, and on q | k | v packed as the UNet has them
            const int W = s.H * s.D;
            for (bool packed : {false, true}) {
                if (packed && s.Lq != s.Lk) continue;
                DeviceBuffer qkv(packed ? nq * 3 * 2 : 2);
                if (packed)  // q | k | v of each token side by side: the same values as the separate buffers
                    for (const auto& [src, col] : {std::pair{&q, 0}, std::pair{&k, 1}, std::pair{&v, 2}})
                        KILN_CUDA_CHECK(cudaMemcpy2D(qkv.h() + col * W, size_t(3 * W) * 2, src->p, size_t(W) * 2,
                                                     size_t(W) * 2, nq / size_t(W), cudaMemcpyDeviceToDevice));
                const __half* qp = packed ? qkv.h() : q.h();
                const __half *kp = packed ? qkv.h() + W : k.h(), *vp = packed ? qkv.h() + 2 * W : v.h();
                const int stride = packed ? 3 * W : W;
                auto once = [&] {
                    if (!cudnn->run({s.B, s.Lq, s.Lk, s.H, s.D, stride, stride}, qp, kp, vp, o.h(), nullptr, workspace))
                        throw kiln::Error(kiln::ErrorKind::Unsupported, "no engine: " + cudnn->last_refusal());
                };
                try {
                    once();
                } catch (const kiln::Error& e) {
                    std::printf("%-26s cuDNN %s: %s\n", s.name, packed ? "packed" : "separate", e.what());
                    continue;
                }
                const Timing t = time_runs(once, warmup, runs);
                const Timing f = time_runs(
                    [&] {
                        kiln::cuda::cuda_attention_f16(qp, kp, vp, o.h(), s.B, s.Lq, s.Lk, s.H, s.D, nullptr, false,
                                                       {stride, stride});
                    },
                    warmup, runs);
                std::printf("%-26s %2d %3d %6d %6d %4d  %-24s %10.4f %10.4f %8.1f\n", s.name, s.B, s.H, s.Lq, s.Lk,
                            s.D, packed ? " cudnn (q|k|v packed)" : " cudnn", t.median_ms, t.min_ms,
                            flops / (t.median_ms * 1e-3) / 1e12);
                if (packed)
                    std::printf("%-26s %2d %3d %6d %6d %4d  %-24s %10.4f %10.4f %8.1f\n", s.name, s.B, s.H, s.Lq,
                                s.Lk, s.D, " kiln (q|k|v packed)", f.median_ms, f.min_ms,
                                flops / (f.median_ms * 1e-3) / 1e12);
            }
        }
        if (!dump_dir.empty()) {  // the default configuration's output: what cuda_attention_f16 gives
            kiln::cuda::cuda_attention_f16(q.h(), k.h(), v.h(), o.h(), s.B, s.Lq, s.Lk, s.H, s.D, nullptr);
            KILN_CUDA_CHECK(cudaDeviceSynchronize());
            dump(dump_dir, s, qh, kh, vh, o);
        }
    }
    if (csv) std::fclose(csv);
    std::printf("(* = the configuration cuda_attention_f16 chooses for the shape)\n");
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const kiln::Error& e) {
        std::fprintf(stderr, "kiln_cuda_attention_bench: %s: %s\n", kiln::error_kind_name(e.kind()), e.what());
        return 1;
    }
}
