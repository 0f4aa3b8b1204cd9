// block_reduce.cuh through row_stats_f32 (one block per row): every block size the contract allows on
// this device's warp size, rows shorter than a warp, shorter than the block, of exactly one block, and
// longer (each thread then folds several values first), all-negative rows (the max must not come from an
// idle thread's identity) and a row whose max sits on the last column. Skipped, with the reason, without
// a GPU. The AMD wave32/wave64 builds of the same kernel are compile-checked by scripts/hip-compile-check.sh.
//
// Bounds, u = 2^-24 and g(k) = k u / (1 - k u) (Higham, Accuracy and Stability, 3.1 and 4.2); a lost warp
// or a thread counted twice is off by whole values, far above them:
//  - the float sum of n values in any order: |sum - exact| <= g(n - 1) sum|x|;
//  - the sum of squared deviations from the kernel's own mean m = fl(sum / n), recomputed here: n
//    non-negative terms (x - m)^2, each off by a factor within (1 + u)^2, summed in any order (a fused
//    multiply-add only rounds less): within g(n + 1) of the exact sum;
//  - the max is exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_info.h"
#include "backends/cuda/gpu_runtime.h"
#include "backends/cuda/row_reduce.h"
#include "kiln/error.h"

namespace kiln::cuda {
namespace {

template <class T>
struct DeviceBuffer {
    T* p = nullptr;
    explicit DeviceBuffer(size_t n) { KILN_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T))); }
    ~DeviceBuffer() { (void)cudaFree(p); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

double gamma(int k) {
    const double ku = k * std::ldexp(1.0, -24);
    return ku / (1 - ku);
}

int warp_size() {
    int device = 0, warp = 0;
    KILN_CUDA_CHECK(cudaGetDevice(&device));
    KILN_CUDA_CHECK(cudaDeviceGetAttribute(&warp, cudaDevAttrWarpSize, device));
    return warp;
}

// Row r: values in [-1, 1) from a fixed LCG; odd rows shifted to [-6, -4) (all negative); row 2 has its
// largest value on the last column.
std::vector<float> make_rows(int rows, int cols) {
    std::vector<float> x(size_t(rows) * cols);
    uint32_t state = 12345u + uint32_t(cols);
    for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < cols; ++c) {
            state = state * 1664525u + 1013904223u;
            float v = float(state >> 8) / float(1 << 23) - 1.0f;
            if (r % 2 == 1) v -= 5.0f;
            x[size_t(r) * cols + c] = v;
        }
    }
    if (rows > 2 && cols > 0) x[size_t(2) * cols + cols - 1] = 3.0f;
    return x;
}

TEST(BlockReduceCuda, SumsAndMaximaAtEveryBlockSize) {
    std::string why;
    if (cuda_devices(&why).empty()) GTEST_SKIP() << "no CUDA GPU on this machine: " << why;
    const int warp = warp_size();
    const int rows = 5;
    for (int threads = warp; threads <= 1024; threads += warp) {
        for (int cols : {1, warp - 1, threads - 1, threads, threads + 1, 3 * threads + 5, 10007}) {
            if (cols < 1) continue;
            const std::vector<float> x = make_rows(rows, cols);
            DeviceBuffer<float> dx(x.size()), dsum(rows), dmax(rows), dsq(rows);
            KILN_CUDA_CHECK(cudaMemcpy(dx.p, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
            detail::row_stats_f32(dx.p, rows, cols, threads, dsum.p, dmax.p, dsq.p, nullptr);
            std::vector<float> sums(rows), maxes(rows), sq_devs(rows);
            KILN_CUDA_CHECK(cudaMemcpy(sums.data(), dsum.p, rows * sizeof(float), cudaMemcpyDeviceToHost));
            KILN_CUDA_CHECK(cudaMemcpy(maxes.data(), dmax.p, rows * sizeof(float), cudaMemcpyDeviceToHost));
            KILN_CUDA_CHECK(cudaMemcpy(sq_devs.data(), dsq.p, rows * sizeof(float), cudaMemcpyDeviceToHost));
            for (int r = 0; r < rows; ++r) {
                const std::string where =
                    "threads=" + std::to_string(threads) + " cols=" + std::to_string(cols) + " row=" + std::to_string(r);
                const float* row = &x[size_t(r) * cols];
                double exact = 0, abs_sum = 0;
                float mx = -INFINITY;
                for (int c = 0; c < cols; ++c) {
                    exact += row[c];
                    abs_sum += std::fabs(row[c]);
                    mx = std::fmax(mx, row[c]);
                }
                EXPECT_LE(std::fabs(sums[r] - exact), gamma(cols - 1) * abs_sum) << where << " sum=" << sums[r];
                EXPECT_EQ(maxes[r], mx) << where;
                const float mean = sums[r] / float(cols);  // the kernel's own mean, rounded as it rounds it
                double sq_exact = 0;
                for (int c = 0; c < cols; ++c) sq_exact += (double(row[c]) - mean) * (double(row[c]) - mean);
                EXPECT_LE(std::fabs(sq_devs[r] - sq_exact), gamma(cols + 1) * sq_exact) << where << " sq_dev=" << sq_devs[r];
            }
        }
    }
}

TEST(BlockReduceCuda, EmptyRowsAndBadBlockSizes) {
    std::string why;
    if (cuda_devices(&why).empty()) GTEST_SKIP() << "no CUDA GPU on this machine: " << why;
    const int warp = warp_size();
    DeviceBuffer<float> dsum(2), dmax(2), dsq(2);
    detail::row_stats_f32(nullptr, 2, 0, warp, dsum.p, dmax.p, dsq.p, nullptr);  // cols = 0: identities
    float sums[2], maxes[2], sq_devs[2];
    KILN_CUDA_CHECK(cudaMemcpy(sums, dsum.p, sizeof sums, cudaMemcpyDeviceToHost));
    KILN_CUDA_CHECK(cudaMemcpy(maxes, dmax.p, sizeof maxes, cudaMemcpyDeviceToHost));
    KILN_CUDA_CHECK(cudaMemcpy(sq_devs, dsq.p, sizeof sq_devs, cudaMemcpyDeviceToHost));
    EXPECT_EQ(sums[0], 0.0f);
    EXPECT_EQ(maxes[1], -INFINITY);
    EXPECT_EQ(sq_devs[1], 0.0f);
    EXPECT_NO_THROW(detail::row_stats_f32(nullptr, 0, 4, warp, nullptr, nullptr, nullptr, nullptr));  // no rows
    for (int threads : {0, warp / 2, warp + 1, 1024 + warp}) {
        try {
            detail::row_stats_f32(nullptr, 1, 0, threads, dsum.p, dmax.p, dsq.p, nullptr);
            ADD_FAILURE() << "threads=" << threads << " accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
        }
    }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace kiln::cuda
