// What the tests of the plain kernels (backends/cuda/kernels.h) share: deterministic inputs rounded to a
// storage type, device buffers whose unwritten elements and overruns show, and the comparison with a
// reference under a bound per element.
//
// Error accounting, used by every kernels_*_cuda_test.cpp (u = 2^-24, float's unit roundoff):
//  - the inputs are generated in float and rounded to the storage type first; the kernel and the
//    reference (ops::ref, double arithmetic) see exactly the same values;
//  - E is the exact result for those inputs. The reference is E in double rounded to float:
//    |ref - E| <= 2u |E| (the final rounding plus the double arithmetic, whose error is below u for every
//    size used here), plus 2^-150 where ref is subnormal;
//  - the kernel computes F in float with |F - E| <= f_rel |E| + f_abs (each test derives f_rel and f_abs
//    for its kernel), then stores round(F) in the storage type: |round(F) - F| <= s |F| + h with s the
//    type's unit roundoff (2^-11 F16, 2^-8 BF16, 0 for F32: a float result is stored as it is) and h half
//    its smallest subnormal spacing (2^-25 F16, 2^-134 BF16, 0 F32);
//  - together |stored - ref| <= ((1 + s)(1 + f_rel)(1 + 2u) - 1) |ref| / (1 - 2u) + (1 + s) f_abs + h
//    + 2^-150: bound() below.
//  - f_rel is built from counts k of roundings and ulps: rel_u(k) = k u (1 + k u) bounds the product of k
//    factors (1 + d_i), |d_i| <= u, so second-order terms are included, not dropped.
// Library function errors are CUDA's documented maxima (CUDA C++ Programming Guide, "Mathematical
// Functions"): expf 2 ulp, erfcf 4 ulp, sqrtf and float division correctly rounded (no fast-math);
// double exp 1 ulp, double sin and cos 2 ulp. One float ulp is at most 2u relative: k ulp = 2k u.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_info.h"
#include "backends/cuda/kernels.h"
#include "core/dtype.h"
#include "core/dtype_convert.h"
#include "core/tensor.h"

namespace kiln::cuda::test {

inline bool have_gpu(std::string* why) {
    static std::string reason;
    static const bool ok = !cuda_devices(&reason).empty();
    *why = reason;
    return ok;
}

#define KILN_SKIP_WITHOUT_GPU()                                                                  \
    do {                                                                                         \
        std::string why_;                                                                        \
        if (!::kiln::cuda::test::have_gpu(&why_)) GTEST_SKIP() << "no CUDA GPU on this machine: " << why_; \
    } while (0)

inline constexpr DType kStorageTypes[] = {DType::F32, DType::F16, DType::BF16};

// ------------------------------------------------------------------------------------------------ bounds

constexpr double kU = 0x1p-24;

inline double rel_u(double k) { return k * kU * (1 + k * kU); }

struct Storage {
    double unit;      // unit roundoff of the one rounding to the type when stored (0: F32 stores the float)
    double half_sub;  // half the smallest subnormal spacing: a rounding's absolute error below normal range
};

inline Storage storage_of(DType type) {
    switch (type) {
        case DType::F16: return {0x1p-11, 0x1p-25};
        case DType::BF16: return {0x1p-8, 0x1p-134};
        default: return {0.0, 0.0};
    }
}

// See the header comment: the bound on |stored - ref| for a float stage within f_rel |E| + f_abs.
inline double bound(DType type, double ref, double f_rel, double f_abs = 0.0) {
    const Storage s = storage_of(type);
    const double rel = (1 + s.unit) * (1 + f_rel) * (1 + 2 * kU) - 1;
    return rel * std::fabs(ref) / (1 - 2 * kU) + (1 + s.unit) * f_abs + s.half_sub + 0x1p-150;
}

// The sequential depth of the kernels' float sums over m values: each thread adds at most ceil(m / 64)
// of them (every reducing block has at least 64 threads), then a tree of at most 10 levels (<= 1024
// threads) combines the threads' sums. A float sum of positive terms, or of any terms measured against
// the sum of their magnitudes, is then off by at most rel_u(depth).
inline double sum_depth(int64_t m) { return std::ceil(double(m) / 64.0) + 10; }

// ------------------------------------------------------------------------------ normalisation error model
// layer_norm, group_norm and im2col's fused norm, over a row or group of m values with first value x0,
// mean mu, biased variance var and A0 = sum |x - x0| (in double, by the definition); D is the depth of the
// kernel's float sums over m values (sum_depth, or run_sum_depth for group_norm_stats):
//  - mean = x0 + (float sum of fl(x - x0)) / float(m): the differences and the sum are off by
//    rel_u(D + 1) A0, the division and float(m) by rel_u(2), the final add by u: |mean - mu| <= delta =
//    (rel_u(D + 1) (A0 / m) (1 + rel_u(2)) + rel_u(2) |mu - x0|) (1 + rel_u(2)) + rel_u(1) |mu|;
//  - var = (float sum of fl(x - mean)^2) / float(m). The exact sum of (x - mean)^2 is m (var + e^2) for
//    e = mean - mu; each term is off by rel_u(3), the sum of these positive terms by rel_u(D), the division
//    by rel_u(2): var' = (var + e^2)(1 + t), |t| <= rel_u(D + 5);
//  - so var' + eps = (var + eps)(1 + rho), |rho| <= (delta^2 + rel_u(D + 5)(var + delta^2)) / (var + eps),
//    and (1 + rho)^(-1/2) is within |rho| of 1 for |rho| <= 1/2; the add, sqrtf and the division are
//    rel_u(3): rstd = r (1 + f), |f| <= eps_r = (1 + rho)(1 + rel_u(3)) - 1, r = 1 / sqrt(var + eps);
//  - y = ((x - mean) rstd) gamma + beta rounds x - mean, two products and the add: with
//    e1 = (1 + eps_r)(1 + rel_u(3)) - 1, |y' - y| <= |gamma| r (|x - mu| e1 + delta (1 + e1)) (1 + rel_u(1))
//    + rel_u(1) |y|: f_abs and f_rel = rel_u(1);
//  - SiLU after it: silu' lies in [-0.1, 1.1], so y's error moves silu(y) by at most 1.1 times it, and the
//    float SiLU adds rel_u(6) (see the pointwise tests); the reference rounds y to float before its SiLU
//    (ops::ref::group_norm, then silu_), which moves its result by up to 1.1 * 2u |y| more.

// group_norm_stats sums each thread's values in runs of 32 (group_norm.cu): a value passes through at most
// 32 + ceil(c / 32) + 1 roundings for c = ceil(m / 64) values per thread, then the tree's 10. Its chunked
// path (m > 8192, a warp per chunk of 512: each lane's 16 or 8 values added pairwise, then the warp's
// butterfly) gives at most 4 + 6 + 2 for a chunk, then ceil(chunks / 256) + 10 in the finish's block: below
// that bound (at least 49 for such m, growing as m / 2048 where this grows as m / 2^17) for every such m.
inline double run_sum_depth(int64_t m) {
    const double c = std::ceil(double(m) / 64.0);
    return std::min(c, 32 + std::ceil(c / 32) + 1) + 10;
}

struct Moments {
    double x0 = 0, mean = 0, var = 0, abs_dev = 0;  // abs_dev: sum |x - x0|
    int64_t count = 0;
};

// Two passes in double over x[0 .. count).
inline Moments moments_of(const float* x, int64_t count) {
    Moments m;
    m.count = count;
    m.x0 = x[0];
    for (int64_t i = 0; i < count; ++i) {
        m.mean += x[i];
        m.abs_dev += std::fabs(double(x[i]) - m.x0);
    }
    m.mean /= double(count);
    for (int64_t i = 0; i < count; ++i) m.var += (x[i] - m.mean) * (x[i] - m.mean);
    m.var /= double(count);
    return m;
}

struct StatsModel {
    double delta;  // bound on |mean' - mu|
    double eps_r;  // bound on |rstd' / r - 1|
    double r;      // 1 / sqrt(var + eps)
};

inline StatsModel stats_model(const Moments& m, float eps, double depth) {
    const double delta = (rel_u(depth + 1) * (m.abs_dev / double(m.count)) * (1 + rel_u(2)) +
                          rel_u(2) * std::fabs(m.mean - m.x0)) * (1 + rel_u(2)) + rel_u(1) * std::fabs(m.mean);
    const double rho = (delta * delta + rel_u(depth + 5) * (m.var + delta * delta)) / (m.var + eps);
    if (rho > 0.5) ADD_FAILURE() << "the error model needs rho <= 1/2, got " << rho << ": choose another input";
    return {delta, (1 + rho) * (1 + rel_u(3)) - 1, 1.0 / std::sqrt(m.var + eps)};
}

struct ErrorTerms {
    double f_rel, f_abs;
};

// The float-stage error of one normalised value y = (x - mu) r gamma + beta (exact, in double), or of silu(y).
inline ErrorTerms norm_error(const StatsModel& s, double x_minus_mu, double gamma, double y, bool silu) {
    const double e1 = (1 + s.eps_r) * (1 + rel_u(3)) - 1;
    const double a = std::fabs(gamma) * s.r * (std::fabs(x_minus_mu) * e1 + s.delta * (1 + e1)) * (1 + rel_u(1));
    if (!silu) return {rel_u(1), a};
    const double dy = a + rel_u(1) * std::fabs(y);
    return {rel_u(6), 1.1 * dy * (1 + rel_u(6)) + 1.1 * 2 * kU * std::fabs(y) * (1 + 2 * kU)};
}

// ------------------------------------------------------------------------------------------------ inputs

// splitmix64: the same inputs on every machine.
struct Rng {
    uint64_t state;
    double unit() {  // [0, 1)
        uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        return double(z >> 11) / double(1ull << 53);
    }
};

// Values in a storage type: the bytes the device gets, and the same values exactly as float.
struct Values {
    DType type = DType::F32;
    std::vector<uint8_t> bytes;
    std::vector<float> f;
    size_t size() const { return f.size(); }
    Tensor tensor(Shape shape) const { return Tensor(std::move(shape), f); }
};

inline Values rounded(DType type, const std::vector<float>& v) {
    Values out;
    out.type = type;
    out.bytes.resize(v.size() * dtype_size(type));
    out.f.resize(v.size());
    if (v.empty()) return out;
    encode_from_float(type, v.data(), out.bytes.data(), v.size());
    decode_to_float(type, out.bytes.data(), out.f.data(), v.size());
    return out;
}

// n values uniform in [lo, hi), rounded to `type`.
inline Values random_values(DType type, size_t n, uint64_t seed, double lo, double hi) {
    Rng rng{seed};
    std::vector<float> v(n);
    for (float& x : v) x = static_cast<float>(lo + (hi - lo) * rng.unit());
    return rounded(type, v);
}

// --------------------------------------------------------------------------------------- device memory

class DeviceBuffer {
public:
    explicit DeviceBuffer(size_t bytes) : bytes_(bytes) { KILN_CUDA_CHECK(cudaMalloc(&ptr_, std::max<size_t>(bytes, 1))); }
    explicit DeviceBuffer(const Values& v) : DeviceBuffer(v.bytes.size()) { upload(v.bytes.data(), v.bytes.size()); }
    DeviceBuffer(DeviceBuffer&& other) noexcept
        : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(DeviceBuffer&&) = delete;
    ~DeviceBuffer() {
        if (ptr_) cudaFree(ptr_);
    }

    void* get() const { return ptr_; }
    template <class T>
    T* as() const { return static_cast<T*>(ptr_); }
    void upload(const void* src, size_t bytes, size_t offset = 0) {
        if (bytes) KILN_CUDA_CHECK(cudaMemcpy(static_cast<uint8_t*>(ptr_) + offset, src, bytes, cudaMemcpyHostToDevice));
    }
    std::vector<uint8_t> download(size_t bytes, size_t offset = 0) const {
        KILN_CUDA_CHECK(cudaDeviceSynchronize());  // a kernel's asynchronous failure surfaces here
        std::vector<uint8_t> out(bytes);
        if (bytes)
            KILN_CUDA_CHECK(cudaMemcpy(out.data(), static_cast<const uint8_t*>(ptr_) + offset, bytes, cudaMemcpyDeviceToHost));
        return out;
    }
    void fill(uint8_t byte) { KILN_CUDA_CHECK(cudaMemset(ptr_, byte, std::max<size_t>(bytes_, 1))); }

private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

// A kernel's output: n elements and kGuard more, all 0xFF bytes first, which is a NaN in F32, F16 and BF16:
// an element the kernel does not write fails any comparison, and a write past the end shows in the guard.
class Output {
public:
    static constexpr size_t kGuard = 64;
    Output(DType type, size_t n) : type_(type), n_(n), buf_((n + kGuard) * dtype_size(type)) { buf_.fill(0xFF); }
    void* get() const { return buf_.get(); }
    std::vector<uint8_t> bytes() const { return buf_.download(n_ * dtype_size(type_)); }
    std::vector<float> values() const {
        const std::vector<uint8_t> b = bytes();
        std::vector<float> out(n_);
        if (n_) decode_to_float(type_, b.data(), out.data(), n_);
        return out;
    }
    bool guard_intact() const {
        const size_t width = dtype_size(type_);
        const std::vector<uint8_t> g = buf_.download(kGuard * width, n_ * width);
        return std::all_of(g.begin(), g.end(), [](uint8_t b) { return b == 0xFF; });
    }

private:
    DType type_;
    size_t n_;
    DeviceBuffer buf_;
};

// ----------------------------------------------------------------------------------------- comparisons

// |got - ref| <= bound element by element (NaN fails); prints the largest error and error/bound ratio.
inline void expect_within(const std::string& what, const std::vector<float>& got, const std::vector<float>& ref,
                          const std::vector<double>& bounds) {
    ASSERT_EQ(got.size(), ref.size()) << what;
    ASSERT_EQ(bounds.size(), ref.size()) << what;
    double max_err = 0, worst = 0;
    size_t failures = 0;
    std::string report;
    for (size_t i = 0; i < got.size(); ++i) {
        const double err = std::fabs(double(got[i]) - double(ref[i]));
        if (!(err <= bounds[i])) {
            if (failures++ < 5)
                report += "  element " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", want " +
                          std::to_string(ref[i]) + ", |err| " + std::to_string(err) + " > bound " +
                          std::to_string(bounds[i]) + "\n";
            continue;
        }
        max_err = std::max(max_err, err);
        if (bounds[i] > 0) worst = std::max(worst, err / bounds[i]);
    }
    std::printf("[ figures  ] %-58s max|err| %.3g, worst err/bound %.3f\n", what.c_str(), max_err, worst);
    EXPECT_EQ(failures, 0u) << what << ": " << failures << " of " << got.size() << " elements out of bounds\n" << report;
}

// Bit-for-bit equality (so -0 differs from +0 and an unwritten NaN from anything).
inline void expect_identical(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
    ASSERT_EQ(got.size(), want.size()) << what;
    size_t failures = 0;
    std::string report;
    for (size_t i = 0; i < got.size(); ++i)
        if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && failures++ < 5)
            report += "  element " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", want " +
                      std::to_string(want[i]) + "\n";
    EXPECT_EQ(failures, 0u) << what << ": " << failures << " of " << got.size() << " elements differ\n" << report;
}

inline std::string label(DType type, const std::string& what) { return std::string(dtype_name(type)) + " " + what; }

}  // namespace kiln::cuda::test
