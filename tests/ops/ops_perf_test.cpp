// Throughput of the heavy ops at Stable Diffusion 1.5's 512x512 sizes (batch 2 for classifier-free
// guidance). Disabled in normal runs; run with
//   kiln_ops_tests --gtest_also_run_disabled_tests --gtest_filter='*Perf*'
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>

#include "harness.h"
#include "ops/ops.h"

namespace kiln::ops::testing {
namespace {

// Best of `reps` timed runs after one warm-up, in seconds.
double best_seconds(const std::function<void()>& f, int reps = 3) {
    f();
    double best = 1e30;
    for (int i = 0; i < reps; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
}

void report_flops(const char* what, double flops, double seconds) {
    std::printf("[perf] %-52s %8.2f ms  %7.1f GFLOP/s  (%d threads)\n", what, seconds * 1e3, flops / seconds * 1e-9,
                omp_get_max_threads());
}

void report_bytes(const char* what, double bytes, double seconds) {
    std::printf("[perf] %-52s %8.2f ms  %7.1f GB/s\n", what, seconds * 1e3, bytes / seconds * 1e-9);
}

TEST(OpsPerf, DISABLED_PerfLinear) {
    // The first feed-forward projection of SD1.5's 64x64 transformer: 320 -> 2 * 1280 (GEGLU).
    const Tensor x = random_tensor({2, 4096, 320}, 1), w = random_tensor({2560, 320}, 2), b = random_tensor({2560}, 3);
    const double s = best_seconds([&] { linear(x, w, &b); });
    report_flops("linear [2,4096,320] x [2560,320]^T", 2.0 * 8192 * 2560 * 320, s);
}

TEST(OpsPerf, DISABLED_PerfConv2d) {
    const Tensor x = random_tensor({2, 320, 64, 64}, 4), w = random_tensor({320, 320, 3, 3}, 5), b = random_tensor({320}, 6);
    const double s = best_seconds([&] { conv2d(x, w, &b, 1, 1); });
    report_flops("conv2d 3x3 320->320 64x64 batch 2", 2.0 * 2 * 320 * 4096 * 320 * 9, s);
    const Tensor w1 = random_tensor({320, 320, 1, 1}, 7);
    const double s1 = best_seconds([&] { conv2d(x, w1, &b); });
    report_flops("conv2d 1x1 320->320 64x64 batch 2", 2.0 * 2 * 320 * 4096 * 320, s1);
    const double s2 = best_seconds([&] { conv2d(x, w, &b, 2, 1); });
    report_flops("conv2d 3x3 s2 320->320 64x64 batch 2", 2.0 * 2 * 320 * 1024 * 320 * 9, s2);
}

TEST(OpsPerf, DISABLED_PerfAttention) {
    const Tensor q = random_tensor({2, 4096, 320}, 8), k = random_tensor({2, 4096, 320}, 9), v = random_tensor({2, 4096, 320}, 10);
    const double s = best_seconds([&] { attention(q, k, v, 8); }, 2);
    report_flops("attention self 4096x4096, 8 heads, d 40, batch 2", 4.0 * 2 * 8 * 4096.0 * 4096 * 40, s);
    const Tensor kc = random_tensor({2, 77, 320}, 11), vc = random_tensor({2, 77, 320}, 12);
    const double sc = best_seconds([&] { attention(q, kc, vc, 8); });
    report_flops("attention cross 4096x77, 8 heads, d 40, batch 2", 4.0 * 2 * 8 * 4096.0 * 77 * 40, sc);
}

TEST(OpsPerf, DISABLED_PerfMemoryBound) {
    const Tensor x = random_tensor({2, 320, 64, 64}, 13);
    const Tensor gamma = random_tensor({320}, 14), beta = random_tensor({320}, 15);
    const double bytes = 4.0 * x.numel();
    report_bytes("group_norm [2,320,64,64] 32 groups (read + write)", 2 * bytes,
                 best_seconds([&] { group_norm(x, 32, gamma, beta, 1e-5f); }));
    Tensor y = x;
    report_bytes("silu_ [2,320,64,64]", 2 * bytes, best_seconds([&] { silu_(y); }));
    // For scale: what a fresh output tensor of the same size costs (allocation, zero fill, page faults),
    // which every op returning a new tensor pays unless the allocator keeps memory around.
    report_bytes("fresh Tensor [2,320,64,64] (allocate + zero)", bytes, best_seconds([&] { Tensor t(x.shape()); }));
    const Tensor h = random_tensor({2, 4096, 2560}, 16);
    report_bytes("geglu [2,4096,2560] -> [2,4096,1280]", 4.0 * h.numel() * 1.5, best_seconds([&] { geglu(h); }));
    report_bytes("nchw_to_nlc [2,320,64,64]", 2 * bytes, best_seconds([&] { nchw_to_nlc(x); }));
    const Tensor s = random_tensor({16, 4096, 77}, 17);
    report_bytes("softmax_lastdim [16,4096,77]", 8.0 * s.numel(), best_seconds([&] { softmax_lastdim(s); }));
}

}  // namespace
}  // namespace kiln::ops::testing
