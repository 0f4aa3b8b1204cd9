// How linear and conv2d multiply block weights on the CPU: int8 dot products (default; activations rounded to
// 8 bits, ops/int8_dot.h) or the weights dequantized to float32 (exact: the GPU backends' products; tests that
// compare with a GPU ask for it). KILN_CPU_Q8=int8|dequantize sets the default. The setting covers every block
// format (q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K, q6_K: ops/int8_dot_weights.h; its name is from when q8_0 was
// the only one).
#pragma once

namespace kiln::ops {

enum class CpuQ8Products { Int8, Dequantize };

// set_cpu_q8_products's, else KILN_CPU_Q8's (InvalidArgument naming a bad value), else Int8.
CpuQ8Products cpu_q8_products();
void set_cpu_q8_products(CpuQ8Products products);

// Sets it while alive (tests), then puts back what was in use.
class ScopedCpuQ8Products {
public:
    explicit ScopedCpuQ8Products(CpuQ8Products p) : saved_(cpu_q8_products()) { set_cpu_q8_products(p); }
    ~ScopedCpuQ8Products() { set_cpu_q8_products(saved_); }
    ScopedCpuQ8Products(const ScopedCpuQ8Products&) = delete;
    ScopedCpuQ8Products& operator=(const ScopedCpuQ8Products&) = delete;

private:
    CpuQ8Products saved_;
};

}  // namespace kiln::ops
