// How linear and conv2d multiply Q8_0 weights on the CPU: with int8 dot products (the default: activations
// rounded to 8 bits per 32-value block, ops/int8_dot.h; several times less arithmetic than float32), or with
// the weights dequantized to float32 (exact: the product of the dequantized values, as the GPU backends
// compute it; tests that compare the CPU with a GPU on the same blocks ask for it). Other block formats are
// always dequantized. The environment variable KILN_CPU_Q8=int8|dequantize sets the default.
#pragma once

namespace kiln::ops {

enum class CpuQ8Products { Int8, Dequantize };

// The setting in use: set_cpu_q8_products's, else KILN_CPU_Q8's (InvalidArgument naming a bad value), else Int8.
CpuQ8Products cpu_q8_products();
void set_cpu_q8_products(CpuQ8Products products);

// Sets it while alive (tests), then puts back what was set before.
class ScopedCpuQ8Products {
public:
    explicit ScopedCpuQ8Products(CpuQ8Products products) : saved_(cpu_q8_products()) { set_cpu_q8_products(products); }
    ~ScopedCpuQ8Products() { set_cpu_q8_products(saved_); }
    ScopedCpuQ8Products(const ScopedCpuQ8Products&) = delete;
    ScopedCpuQ8Products& operator=(const ScopedCpuQ8Products&) = delete;

private:
    CpuQ8Products saved_;
};

}  // namespace kiln::ops
