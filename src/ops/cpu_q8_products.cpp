#include "ops/cpu_q8_products.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "kiln/error.h"

namespace kiln::ops {

namespace {

CpuQ8Products from_env() {
    const char* v = std::getenv("KILN_CPU_Q8");
    if (!v || !*v || std::string(v) == "int8") return CpuQ8Products::Int8;
    if (std::string(v) == "dequantize") return CpuQ8Products::Dequantize;
    fail(ErrorKind::InvalidArgument, std::string("KILN_CPU_Q8=") + v + ": expected int8 or dequantize");
}

std::atomic<int> chosen{-1};  // -1: not set, KILN_CPU_Q8 decides

}  // namespace

CpuQ8Products cpu_q8_products() {
    const int set = chosen.load(std::memory_order_relaxed);
    if (set >= 0) return CpuQ8Products(set);
    static const CpuQ8Products env = from_env();
    return env;
}

void set_cpu_q8_products(CpuQ8Products products) { chosen.store(int(products), std::memory_order_relaxed); }

}  // namespace kiln::ops
