// The CUDA flash-attention kernel against the CPU attention op, on shapes chosen to break tiling:
// one key, lengths just under and over the 64-key tile and the 64/128-row block (31, 33, 77, 129),
// 4096 and 16384, cross attention (Lk = 77), head dims 40/64/80/160 (padded to 48/64/80/160) and
// odd ones (7, 24, 200), causal masks with Lq < Lk and Lq > Lk, a sharp softmax, a misaligned pointer.
// Every compiled tile configuration for the head dim runs. Skipped, with the reason, without a GPU.
//
// The inputs are rounded to fp16 first, so the kernel and the reference see the same numbers. Error
// bound per output element (u = 2^-24 for float32, u16 = 2^-11 for fp16, both round-to-nearest):
//  - the output is rounded to fp16 once: u16 |ref| (+ u16 times the error below, second order);
//  - the weights p are rounded to fp16 before the p v product, while the normaliser sums the fp32 p:
//    each term is off by a factor within u16, so the output by at most u16 * sum_j p_j |v_jc| / sum_j p_j,
//    which is attention(q, k, |v|) =: W; weights below 2^-14 (fp16 subnormals; the running max is 1)
//    are off by up to 2^-25 absolute, at most 2^-25 sum_j |v_jc| in all;
//  - float32 scores on both sides: |s error| <= (D + 2) u A_i per side, with the tensor cores'
//    accumulation counted at 2u a step (it may truncate), A_i = max_j sum_d |q_id k_jd| / sqrt(D); with
//    the exp's own error (ex2.approx, ~2 ulp) and the scaling, each weight is off by a factor
//    (1 + eta), normalisation at most doubling eta: together (8D + 40) A_i u for both sides;
//  - the sums over keys: the reference's float sums (2 Lk u, see tests/ops), the kernel's p v and row
//    sums (Lk/8 + Lk/4) u and the per-64-key-tile rescaling (~Lk/5 u): 3 Lk u; constants 128 u.
// So |out - ref| <= u16 |ref| + (u16 (1 + u16) + ((8D + 40) A_i + 3 Lk + 128) u) W + 2^-25 sum_j |v_jc|.
// A_i is bounded above by sum_d |q_id| max_j |k_jd| / sqrt(D) (cheaper, and only loosens the bound).
// A wrong tile, a missed mask or a lost rescale is off by O(|v|), far above this.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/arch_paths.h"
#include "backends/cuda/attention.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_device_ops.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cudnn_attention.h"
#include "backends/cuda/device_info.h"
#include "core/half.h"
#include "core/tensor.h"
#include "kiln/error.h"
#if defined(KILN_CUDA_TEST_REF_ATTENTION)
// Standalone GPU-machine build without BLAS: kiln's plain double-precision reference op.
#include "ops/ref/ref_ops.h"
#else
#include "ops/ops.h"
#endif

namespace kiln::cuda {
namespace {

constexpr double kU = 1.0 / 16777216.0;   // 2^-24
constexpr double kU16 = 1.0 / 2048.0;     // 2^-11
constexpr double kSub16 = 1.0 / 33554432.0;  // 2^-25: half the fp16 subnormal spacing
constexpr uint16_t kPoison = 0xFFFF;      // a NaN: any element the kernel does not write fails

Tensor cpu_attention(const Tensor& q, const Tensor& k, const Tensor& v, int heads, bool causal) {
#if defined(KILN_CUDA_TEST_REF_ATTENTION)
    return ops::ref::attention(q, k, v, heads, causal);
#else
    return ops::attention(q, k, v, heads, causal);
#endif
}

bool have_gpu(std::string* why) { return !cuda_devices(why).empty(); }

#define KILN_REQUIRE_GPU()                                                          \
    do {                                                                            \
        std::string why_;                                                           \
        if (!have_gpu(&why_)) GTEST_SKIP() << "no CUDA GPU on this machine: " << why_; \
    } while (0)

class DeviceBuffer {
public:
    explicit DeviceBuffer(size_t bytes) { KILN_CUDA_CHECK(cudaMalloc(&ptr_, std::max<size_t>(bytes, 1))); }
    ~DeviceBuffer() { cudaFree(ptr_); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    template <typename T>
    T* as() const { return static_cast<T*>(ptr_); }

private:
    void* ptr_ = nullptr;
};

// splitmix64: deterministic inputs, reproducible everywhere.
struct Rng {
    uint64_t state;
    double uniform() {  // [-1, 1)
        uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        return double(z >> 11) / double(1ull << 52) - 1.0;
    }
};

// Random fp16 values in [-scale, scale) and the same values as float.
void random_half(size_t n, uint64_t seed, float scale, std::vector<uint16_t>& h, std::vector<float>& f) {
    Rng rng{seed};
    h.resize(n);
    f.resize(n);
    for (size_t i = 0; i < n; ++i) {
        h[i] = float_to_half(static_cast<float>(rng.uniform() * scale));
        f[i] = half_to_float(h[i]);
    }
}

struct Case {
    const char* name;
    int B, Lq, Lk, H, D;
    bool causal = false;
    float q_scale = 1.0f;     // larger: a sharper softmax
    bool misaligned = false;  // q starts 2 bytes past a 16-byte boundary (the element-wise path)
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

// The CPU side of one case: inputs, reference output and the bound of every element.
struct Expected {
    std::vector<uint16_t> qh, kh, vh;
    std::vector<float> ref, bound;
};

Expected expect_case(const Case& c, uint64_t seed) {
    Expected e;
    std::vector<float> qf, kf, vf;
    const int W = c.H * c.D;
    random_half(size_t(c.B) * c.Lq * W, seed, c.q_scale, e.qh, qf);
    random_half(size_t(c.B) * c.Lk * W, seed + 1, 1.0f, e.kh, kf);
    random_half(size_t(c.B) * c.Lk * W, seed + 2, 1.0f, e.vh, vf);
    std::vector<float> vabs(vf.size());
    std::transform(vf.begin(), vf.end(), vabs.begin(), [](float x) { return std::fabs(x); });
    const Tensor q({c.B, c.Lq, W}, qf), k({c.B, c.Lk, W}, kf);
    const Tensor ref = cpu_attention(q, k, Tensor({c.B, c.Lk, W}, vf), c.H, c.causal);
    const Tensor weighted = cpu_attention(q, k, Tensor({c.B, c.Lk, W}, vabs), c.H, c.causal);
    e.ref = ref.values();
    e.bound.assign(e.ref.size(), 0.0f);
    for (int b = 0; b < c.B; ++b)
        for (int h = 0; h < c.H; ++h) {
            std::vector<double> kmax(c.D, 0.0), vsum(c.D, 0.0);
            for (int j = 0; j < c.Lk; ++j)
                for (int d = 0; d < c.D; ++d) {
                    const size_t idx = (size_t(b) * c.Lk + j) * W + h * c.D + d;
                    kmax[d] = std::max(kmax[d], double(std::fabs(kf[idx])));
                    vsum[d] += std::fabs(vf[idx]);
                }
            for (int i = 0; i < c.Lq; ++i) {
                const size_t row = (size_t(b) * c.Lq + i) * W + h * c.D;
                double a = 0.0;
                for (int d = 0; d < c.D; ++d) a += std::fabs(qf[row + d]) * kmax[d];
                a /= std::sqrt(double(c.D));
                const double wf = kU16 * (1 + kU16) + ((8.0 * c.D + 40) * a + 3.0 * c.Lk + 128) * kU;
                for (int d = 0; d < c.D; ++d)
                    e.bound[row + d] = static_cast<float>(kU16 * std::fabs(e.ref[row + d]) +
                                                          wf * weighted.values()[row + d] + kSub16 * vsum[d]);
            }
        }
    return e;
}

struct Outcome {
    bool ok = true;
    std::string message;
    double max_err = 0, worst_ratio = 0, max_ref = 0;
};

// Queues one attention on the default stream: q, k and v with tokens `q_stride` and `kv_stride` elements apart.
// Returns false where the route has no kernel for the case (cuDNN's fused attention only).
using Launch = std::function<bool(const __half* q, const __half* k, const __half* v, __half* out, int q_stride,
                                  int kv_stride)>;

// Runs `launch` on the case's inputs and checks every output element against its bound. packed: q | k | v of a
// token side by side in one buffer (self-attention's one product; Lq == Lk), as the UNet passes them.
Outcome run_gpu(const Case& c, const Expected& e, const Launch& launch, bool packed = false, bool* ran = nullptr) {
    const size_t nq = e.qh.size(), nk = e.kh.size();
    const size_t W = size_t(c.H) * c.D;
    constexpr size_t kGuard = 64;  // poisoned elements after the output, which must stay untouched
    const size_t q_off = c.misaligned ? 1 : 0;
    // Exact sizes, so that compute-sanitizer sees any read past an input.
    DeviceBuffer q((packed ? 3 * nq : nq + q_off) * 2), k(packed ? 2 : nk * 2), v(packed ? 2 : nk * 2),
        out((nq + kGuard) * 2);
    if (packed) {
        std::vector<uint16_t> qkv(3 * nq);
        for (size_t t = 0; t < nq / W; ++t) {
            std::copy_n(e.qh.begin() + t * W, W, qkv.begin() + 3 * t * W);
            std::copy_n(e.kh.begin() + t * W, W, qkv.begin() + 3 * t * W + W);
            std::copy_n(e.vh.begin() + t * W, W, qkv.begin() + 3 * t * W + 2 * W);
        }
        KILN_CUDA_CHECK(cudaMemcpy(q.as<uint16_t>(), qkv.data(), qkv.size() * 2, cudaMemcpyHostToDevice));
    } else {
        KILN_CUDA_CHECK(cudaMemcpy(q.as<uint16_t>() + q_off, e.qh.data(), nq * 2, cudaMemcpyHostToDevice));
        KILN_CUDA_CHECK(cudaMemcpy(k.as<uint16_t>(), e.kh.data(), nk * 2, cudaMemcpyHostToDevice));
        KILN_CUDA_CHECK(cudaMemcpy(v.as<uint16_t>(), e.vh.data(), nk * 2, cudaMemcpyHostToDevice));
    }
    std::vector<uint16_t> host(nq + kGuard, kPoison);
    KILN_CUDA_CHECK(cudaMemcpy(out.as<uint16_t>(), host.data(), host.size() * 2, cudaMemcpyHostToDevice));

    const bool launched = packed ? launch(q.as<__half>(), q.as<__half>() + W, q.as<__half>() + 2 * W,
                                          out.as<__half>(), int(3 * W), int(3 * W))
                                 : launch(q.as<__half>() + q_off, k.as<__half>(), v.as<__half>(), out.as<__half>(),
                                          int(W), int(W));
    if (ran) *ran = launched;
    Outcome r;
    if (!launched) return r;
    KILN_CUDA_CHECK(cudaDeviceSynchronize());
    KILN_CUDA_CHECK(cudaMemcpy(host.data(), out.as<uint16_t>(), host.size() * 2, cudaMemcpyDeviceToHost));

    int reported = 0;
    for (size_t i = 0; i < nq; ++i) {
        const double got = half_to_float(host[i]), want = e.ref[i], err = std::fabs(got - want);
        r.max_ref = std::max(r.max_ref, std::fabs(want));
        const bool bad = !(err <= e.bound[i]);  // NaN fails
        if (!std::isnan(err)) {
            r.max_err = std::max(r.max_err, err);
            if (e.bound[i] > 0) r.worst_ratio = std::max(r.worst_ratio, err / e.bound[i]);
        }
        if (bad) {
            r.ok = false;
            if (reported++ < 5)
                r.message += "  element " + std::to_string(i) + ": got " + std::to_string(got) + ", want " +
                             std::to_string(want) + ", bound " + std::to_string(e.bound[i]) + "\n";
        }
    }
    for (size_t i = nq; i < host.size(); ++i)
        if (host[i] != kPoison) {
            r.ok = false;
            r.message += "  wrote past the output at element " + std::to_string(i) + "\n";
            break;
        }
    return r;
}

Outcome run_gpu(const Case& c, const Expected& e, int config) {
    return run_gpu(c, e, [&](const __half* q, const __half* k, const __half* v, __half* out, int, int) {
        detail::cuda_attention_f16_config(q, k, v, out, c.B, c.Lq, c.Lk, c.H, c.D, nullptr, c.causal, config);
        return true;
    });
}

uint64_t seed_of(const Case& c) { return 1000 + uint64_t(c.Lq) * 7 + c.Lk * 13 + c.D; }

// The flash kernel runs from compute capability 8.0, in configurations within the device's shared memory
// (arch_paths.h; under KILN_CUDA_ARCH as on a device of that capability).
void check_case(const Case& c) {
    const std::vector<detail::AttentionConfig> configs = detail::attention_configs(c.D);
    ASSERT_FALSE(configs.empty()) << "no configuration for D = " << c.D;
    const ArchPaths& arch = device_arch_paths(0);
    if (!arch.flash_attention) GTEST_SKIP() << "the flash kernel needs compute capability 8.0; cuda:0 chooses as "
                                            << capability_name(arch.capability);
    const Expected e = expect_case(c, seed_of(c));
    for (int i = 0; i < int(configs.size()); ++i) {
        const detail::AttentionConfig& cfg = configs[i];
        if (cfg.smem_bytes > size_t(arch.max_shared_per_block)) continue;  // never chosen here
        const Outcome r = run_gpu(c, e, i);
        std::printf("[ figures  ] %-30s padded_d %3d rows %3d (%d warps x %d) stages %d q %s: max|err| %.3g, "
                    "max|ref| %.3g, worst err/bound %.3f\n",
                    c.name, cfg.padded_d, cfg.block_rows, cfg.warps, cfg.warp_rows, cfg.stages,
                    cfg.q_in_registers ? "regs" : "smem", r.max_err, r.max_ref, r.worst_ratio);
        EXPECT_TRUE(r.ok) << c.name << ", configuration " << i << " (" << cfg.block_rows << " rows, " << cfg.warps
                          << " warps):\n"
                          << r.message;
    }
}

class AttentionCudaSmall : public ::testing::TestWithParam<Case> {};
class AttentionCudaLarge : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionCudaSmall, MatchesCpu) {
    KILN_REQUIRE_GPU();
    check_case(GetParam());
}
TEST_P(AttentionCudaLarge, MatchesCpu) {
    KILN_REQUIRE_GPU();
    check_case(GetParam());
}

// Small enough for compute-sanitizer (memcheck, racecheck), yet every edge of the tiling.
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionCudaSmall,
                         ::testing::Values(Case{"one_query_one_key_d40", 1, 1, 1, 1, 40},
                                           Case{"lq31_lk33_b2_h3_d40", 2, 31, 33, 3, 40},
                                           Case{"lq33_lk31_h2_d80", 1, 33, 31, 2, 80},
                                           Case{"clip_b2_l77_h8_d64", 2, 77, 77, 8, 64},
                                           Case{"clip_causal_b2_l77_h8_d64", 2, 77, 77, 8, 64, true},
                                           Case{"causal_lq33_lk200_h2_d40", 1, 33, 200, 2, 40, true},
                                           Case{"causal_lq130_lk31_h2_d80", 1, 130, 31, 2, 80, true},
                                           Case{"sharp_lq129_lk65_h2_d160", 1, 129, 65, 2, 160, false, 8.0f},
                                           Case{"odd_d7_b2_h3", 2, 33, 65, 3, 7},
                                           Case{"d24_h5", 1, 40, 70, 5, 24},
                                           Case{"d36_lq65_lk70_h2", 1, 65, 70, 2, 36},
                                           Case{"d200_lq17_lk65", 1, 17, 65, 1, 200},
                                           Case{"d256_lq70_lk130", 1, 70, 130, 1, 256},
                                           Case{"misaligned_q_d64", 1, 31, 33, 2, 64, false, 1.0f, true},
                                           Case{"b4_lq1_lk1000_h5_d64", 4, 1, 1000, 5, 64}),
                         [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

// Stable Diffusion's own sizes and the long edges.
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionCudaLarge,
                         ::testing::Values(Case{"cross_b3_lq4096_lk77_h8_d40", 3, 4096, 77, 8, 40},
                                           Case{"self_b1_l4096_h2_d64", 1, 4096, 4096, 2, 64},
                                           Case{"self_b2_l1024_h2_d80", 2, 1024, 1024, 2, 80},
                                           Case{"self_b2_l256_h8_d160", 2, 256, 256, 8, 160},
                                           Case{"lq16384_lk31_d160", 1, 16384, 31, 1, 160},
                                           Case{"lq17_lk16384_h2_d160", 1, 17, 16384, 2, 160},
                                           Case{"cross_b4_lq4096_lk77_h2_d64", 4, 4096, 77, 2, 64},
                                           Case{"sharp_b1_l1024_h1_d40", 1, 1024, 1024, 1, 40, false, 6.0f},
                                           Case{"causal_b1_l1000_h1_d64", 1, 1000, 1000, 1, 64, true}),
                         [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

// cuDNN's fused attention (the backend times it against the flash kernel per shape and keeps the faster) under
// the same bounds: its arithmetic is the kernel's (float32 scores and statistics, fp16 weights before p v).
// Cases it has no engine for (head dims not a multiple of 8, misaligned pointers, what its version refuses) are
// listed; the cases of Stable Diffusion's head dims must run where cuDNN is 9.13 or later.
TEST(CudnnAttentionCuda, MatchesCpuWhereItHasAnEngine) {
    KILN_REQUIRE_GPU();
    const int64_t version = CudnnAttention::version();
    if (!device_arch_paths(0).cudnn_attention)
        GTEST_SKIP() << "cuDNN's attention needs compute capability 8.0; cuda:0 chooses as "
                     << capability_name(device_arch_paths(0).capability);
    if (!CudnnAttention::available())
        GTEST_SKIP() << "no fused attention operation: kiln built without cuDNN 9.13+ headers, or library " << version;
    CudnnAttention cudnn;
    std::vector<std::unique_ptr<DeviceBuffer>> scratch;
    auto workspace = [&](size_t bytes) {
        scratch.push_back(std::make_unique<DeviceBuffer>(bytes));
        return scratch.back()->as<void>();
    };
    const Case cases[] = {
        {"one_query_one_key_d40", 1, 1, 1, 1, 40},
        {"lq31_lk33_b2_h3_d40", 2, 31, 33, 3, 40},
        {"lq33_lk31_h2_d80", 1, 33, 31, 2, 80},
        {"clip_b2_l77_h8_d64", 2, 77, 77, 8, 64},
        {"sharp_lq129_lk65_h2_d160", 1, 129, 65, 2, 160, false, 8.0f},
        {"d24_h5", 1, 40, 70, 5, 24},
        {"d256_lq70_lk130", 1, 70, 130, 1, 256},
        {"b4_lq1_lk1000_h5_d64", 4, 1, 1000, 5, 64},
        {"cross_b3_lq4096_lk77_h8_d40", 3, 4096, 77, 8, 40},
        {"self_b2_l4096_h8_d40", 2, 4096, 4096, 8, 40},
        {"self_b2_l1024_h2_d80", 2, 1024, 1024, 2, 80},
        {"self_b2_l256_h8_d160", 2, 256, 256, 8, 160},
        {"self_b1_l4096_h2_d64", 1, 4096, 4096, 2, 64},
        {"sharp_b1_l1024_h1_d40", 1, 1024, 1024, 1, 40, false, 6.0f},
        {"odd_d7_b2_h3", 2, 33, 65, 3, 7},                                 // refused: d % 8
        {"misaligned_q_d64", 1, 31, 33, 2, 64, false, 1.0f, true},        // refused: q not 16-byte aligned
    };
    for (const Case& c : cases) {
        const Expected e = expect_case(c, seed_of(c));
        for (bool packed : {false, true}) {
            if (packed && (c.Lq != c.Lk || c.misaligned)) continue;
            bool ran = false;
            const Outcome r = run_gpu(
                c, e,
                [&](const __half* q, const __half* k, const __half* v, __half* out, int q_stride, int kv_stride) {
                    return cudnn.run({c.B, c.Lq, c.Lk, c.H, c.D, q_stride, kv_stride}, q, k, v, out, nullptr,
                                     workspace);
                },
                packed, &ran);
            std::printf("[ figures  ] cuDNN %lld %-28s %s: %s", (long long)version, c.name,
                        packed ? "q|k|v packed" : "separate",
                        ran ? "" : ("no engine: " + cudnn.last_refusal() + "\n").c_str());
            if (ran)
                std::printf("max|err| %.3g, max|ref| %.3g, worst err/bound %.3f\n", r.max_err, r.max_ref,
                            r.worst_ratio);
            EXPECT_TRUE(r.ok) << c.name << (packed ? " (packed)" : "") << ":\n" << r.message;
            const bool sd_head_dim = c.D == 40 || c.D == 64 || c.D == 80 || c.D == 160;
            if (sd_head_dim && !c.misaligned) {
                EXPECT_TRUE(ran) << c.name << (packed ? " (packed)" : "") << ": no engine";
            }
            if (c.D % 8 || c.misaligned) {
                EXPECT_FALSE(ran) << c.name << ": should have been refused";
            }
        }
    }
}

// The backend's attention op on each KILN_CUDA_ATTENTION route (read when the backend is made), twice: the first
// call chooses the route (timing both where measured), the second takes the remembered one. Packed q | k | v
// (the UNet's self-attention) and separate q, k, v (through a column view of k, v's offsets: attention_kv),
// each against the flash kernel's bounds.
TEST(CudnnAttentionCuda, EveryRouteThroughTheBackendMatchesTheCpu) {
    KILN_REQUIRE_GPU();
    const Case c{"self_b2_l1024_h2_d80", 2, 1024, 1024, 2, 80};
    const Expected e = expect_case(c, seed_of(c));
    const int64_t W = int64_t(c.H) * c.D;
    auto as_floats = [](const std::vector<uint16_t>& h) {
        std::vector<float> f(h.size());
        for (size_t i = 0; i < h.size(); ++i) f[i] = half_to_float(h[i]);
        return f;
    };
    const std::vector<float> qf = as_floats(e.qh), kf = as_floats(e.kh), vf = as_floats(e.vh);
    std::vector<float> qkv(qf.size() * 3), kv(kf.size() * 2);
    for (size_t t = 0; t < qf.size() / size_t(W); ++t) {
        std::copy_n(qf.begin() + t * W, W, qkv.begin() + 3 * t * W);
        std::copy_n(kf.begin() + t * W, W, qkv.begin() + 3 * t * W + W);
        std::copy_n(vf.begin() + t * W, W, qkv.begin() + 3 * t * W + 2 * W);
        std::copy_n(kf.begin() + t * W, W, kv.begin() + 2 * t * W);
        std::copy_n(vf.begin() + t * W, W, kv.begin() + 2 * t * W + W);
    }
    for (const char* route : {"kiln", "cudnn", "measured"}) {
        setenv("KILN_CUDA_ATTENTION", route, 1);
        CudaBackend gpu(0);
        unsetenv("KILN_CUDA_ATTENTION");
        const Tensor packed = Tensor({c.B, c.Lq, 3 * W}, qkv).to_device(gpu, DType::F16);
        const Tensor q = Tensor({c.B, c.Lq, W}, qf).to_device(gpu, DType::F16);
        const Tensor keys = Tensor({c.B, c.Lk, 2 * W}, kv).to_device(gpu, DType::F16);
        for (int call = 0; call < 2; ++call)
            for (bool self : {true, false}) {
                const std::vector<float> got = (self ? gpu.ops().attention_qkv(packed, c.H)
                                                     : gpu.ops().attention_kv(q, keys, c.H, 0))
                                                   .to_host()
                                                   .values();
                ASSERT_EQ(got.size(), e.ref.size());
                int bad = 0;
                for (size_t i = 0; i < got.size(); ++i)
                    if (!(std::fabs(got[i] - e.ref[i]) <= e.bound[i]) && bad++ < 3)
                        ADD_FAILURE() << route << (self ? " attention_qkv" : " attention_kv") << " call " << call
                                      << ", element " << i << ": got " << got[i] << ", want " << e.ref[i]
                                      << ", bound " << e.bound[i];
            }
    }
}

// Below 8.0 (or under KILN_CUDA_ARCH=75) the kernel is not launched: Unsupported (the backend uses products there).
TEST(AttentionCuda, TheKernelRefusesDevicesBelowAmpere) {
    KILN_REQUIRE_GPU();
    const ArchPaths& arch = device_arch_paths(0);
    if (arch.flash_attention)
        GTEST_SKIP() << "cuda:0 chooses as " << capability_name(arch.capability) << ": run with KILN_CUDA_ARCH=75";
    DeviceBuffer q(64 * 2), out(64 * 2);
    try {
        cuda_attention_f16(q.as<__half>(), q.as<__half>(), q.as<__half>(), out.as<__half>(), 1, 1, 1, 1, 64, nullptr);
        ADD_FAILURE() << "launched below 8.0";
    } catch (const Error& err) {
        EXPECT_EQ(err.kind(), ErrorKind::Unsupported);
        EXPECT_NE(std::string(err.what()).find("compute capability 8.0"), std::string::npos) << err.what();
    }
}

TEST(CudnnAttentionCuda, AnUnknownRouteIsAnErrorNamingTheSetting) {
    KILN_REQUIRE_GPU();
    setenv("KILN_CUDA_ATTENTION", "fast", 1);
    try {
        CudaBackend gpu(0);
        ADD_FAILURE() << "KILN_CUDA_ATTENTION=fast was accepted";
    } catch (const Error& err) {
        EXPECT_EQ(err.kind(), ErrorKind::InvalidArgument);
        EXPECT_NE(std::string(err.what()).find("KILN_CUDA_ATTENTION"), std::string::npos) << err.what();
    }
    unsetenv("KILN_CUDA_ATTENTION");
}

// ------------------------------------------------------------------ no GPU needed: arguments and errors

TEST(AttentionCudaArgs, ConfigsCoverTheStableDiffusionHeadDims) {
    for (int d : {40, 64, 80, 160}) {
        const auto configs = detail::attention_configs(d);
        ASSERT_FALSE(configs.empty()) << d;
        EXPECT_EQ(configs[0].padded_d, (d + 15) / 16 * 16) << d;
        for (const auto& c : configs) EXPECT_EQ(c.block_rows, c.warps * c.warp_rows) << d;
    }
    EXPECT_TRUE(detail::attention_configs(0).empty());
    EXPECT_TRUE(detail::attention_configs(257).empty());
}

TEST(AttentionCudaArgs, ShortSequencesGetSmallerBlocks) {
    constexpr int kSms = 132;  // H100 / H200
    auto rows = [](int d, int b, int lq, int h) {
        return detail::attention_configs(d)[detail::choose_attention_config(d, b, lq, h, kSms)].block_rows;
    };
    // The cases measured on an H200 (bench/cuda/attention_bench.cu shapes).
    EXPECT_EQ(detail::choose_attention_config(40, 2, 4096, 8, kSms), 0);  // long: the first choice
    EXPECT_EQ(detail::choose_attention_config(64, 2, 4096, 10, kSms), 0);
    EXPECT_EQ(rows(80, 2, 1024, 8), 128);   // one block per SM either way: the bigger blocks were faster
    EXPECT_EQ(rows(64, 2, 1024, 10), 64);   // 160 blocks of 128 rows on 132 SMs: 64-row blocks were faster
    EXPECT_EQ(rows(64, 2, 1024, 20), 128);  // shares 384 vs 320 rows: measured a tie
    EXPECT_EQ(rows(64, 1, 1, 1), 64);       // one query: the smallest block
    EXPECT_EQ(rows(160, 2, 256, 8), 64);
}

TEST(AttentionCudaArgs, BadSizesThrowBeforeAnyLaunch) {
    auto kind_of = [](auto&& f) {
        try {
            f();
        } catch (const Error& e) {
            return static_cast<int>(e.kind());
        }
        return -1;
    };
    const __half* p = reinterpret_cast<const __half*>(uintptr_t(256));  // never dereferenced
    __half* o = reinterpret_cast<__half*>(uintptr_t(512));
    EXPECT_EQ(kind_of([&] { cuda_attention_f16(p, p, p, o, 1, 4, 0, 1, 64, nullptr); }),
              int(ErrorKind::InvalidArgument));  // no keys
    EXPECT_EQ(kind_of([&] { cuda_attention_f16(p, p, p, o, 1, 4, 4, 0, 64, nullptr); }), int(ErrorKind::InvalidArgument));
    EXPECT_EQ(kind_of([&] { cuda_attention_f16(p, p, p, o, 1, 4, 4, 1, 300, nullptr); }), int(ErrorKind::Unsupported));
    EXPECT_EQ(kind_of([&] { cuda_attention_f16(nullptr, p, p, o, 1, 4, 4, 1, 64, nullptr); }),
              int(ErrorKind::InvalidArgument));
    EXPECT_EQ(kind_of([&] { detail::cuda_attention_f16_config(p, p, p, o, 1, 4, 4, 1, 64, nullptr, false, 99); }),
              int(ErrorKind::InvalidArgument));
    EXPECT_EQ(kind_of([&] { cuda_attention_f16(p, p, p, o, 0, 4, 4, 1, 64, nullptr); }), -1);  // B = 0: nothing to do
}

}  // namespace
}  // namespace kiln::cuda
