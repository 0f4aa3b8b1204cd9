// A model loaded with block-format weights (--weights q8_0, q4_1, q4_K, q5_0) on each GPU backend: its device memory
// holds the blocks (block bytes, not a dequantized copy), and its UNet gives the CPU's output on the same blocks.
// Run once per GPU device (lavapipe's Vulkan in CI); none without one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "common/fixtures.h"
#include "gpu_test_util.h"
#include "io/safetensors.h"
#include "ops/cpu_q8_products.h"
#include "pipeline/generate.h"

using namespace kiln;
using kiln::test::data_path;

namespace {

const char* kModel = "sd15-mini/sd15-mini.safetensors";  // fp16 weights

StableDiffusionModel load(Device device, DType precision, std::optional<DType> weights) {
    LoadOptions o;
    o.device = device;
    o.precision = precision;
    o.weights = weights;
    return load_model(data_path(kModel), o);
}

int64_t device_weight_bytes(const Backend& gpu) {
    return memory_stats().device(device_name(gpu.device()))[MemoryCategory::Weights].current;
}

// The bytes of weights the model holds on the device (measured while it is alive).
int64_t weights_on(Backend& gpu, std::optional<DType> weights) {
    const int64_t before = device_weight_bytes(gpu);
    const StableDiffusionModel m = load(gpu.device(), DType::F16, weights);
    return device_weight_bytes(gpu) - before;
}

}  // namespace

class QuantizedModel : public kiln::test::GpuTest {};
KILN_GPU_TEST_SUITE(QuantizedModel);

// The same file three ways: fp16 (F bytes), q8_0 (34 bytes per 32 quantized values) and q5_0 (22 bytes), in fp16
// precision. q8_0 and q5_0 quantize the same N values (the policy of models/quant_policy.h differs only at 4 bits)
// and keep the rest R 16-bit: F = R + 2N, Q8 = R + 34/32 N, Q5 = R + 22/32 N. N follows from the first two, and the
// third must then hold to the byte: what a dequantized copy (2N more) or any other extra would break.
TEST_P(QuantizedModel, DeviceMemoryHoldsTheBlocks) {
    Backend& gpu = this->gpu();
    if (!gpu.supports(DType::F16)) GTEST_SKIP() << "no fp16 storage on " << device_name(gpu.device());
    const int64_t f16 = weights_on(gpu, std::nullopt), q8 = weights_on(gpu, DType::Q8_0), q5 = weights_on(gpu, DType::Q5_0);
    std::printf("[ quantized model ] %s weights: fp16 %lld B, q8_0 %lld B, q5_0 %lld B\n",
                device_name(gpu.device()).c_str(), (long long)f16, (long long)q8, (long long)q5);
    // (F - Q8) = N (2 - 34/32) = N 30/32.
    ASSERT_GT(f16 - q8, 0) << "q8_0 weights must take less device memory than fp16";
    ASSERT_EQ((f16 - q8) * 32 % 30, 0) << "the saving is not 30/32 bytes per quantized value";
    const int64_t n = (f16 - q8) * 32 / 30;
    EXPECT_EQ(n % 32, 0) << "quantized values come in blocks of 32";
    EXPECT_EQ(q5, f16 - n * 42 / 32) << "q5_0: 22 bytes per 32 of the same " << n << " values";
    // Most of the UNet's parameters are quantized: the test is not of a model with a handful of blocks.
    EXPECT_GT(n, f16 / 2 / 2) << "quantized values " << n << " of about " << f16 / 2;
}

// The UNet on the fixture call, on the device and on the CPU, with the same blocks. The device decodes them to the
// host's float32 values bit for bit (block_weights_test.cpp), so in float32 the outputs differ by summation order
// alone: ModulesMatchTheCpu's 2e-5 (model_conformance_test.cpp). In fp16 the decoded weights are rounded to fp16
// once more, unlike that test's fp16 file: each product's rounding of its weights adds at most u of its sum, as its
// output rounding does, so the deepest path's 64 roundings become at most 128: 128 u = 6.3e-2.
TEST_P(QuantizedModel, UNetMatchesTheCpu) {
    Backend& gpu = this->gpu();
    const SafetensorsFile ref = SafetensorsFile::open(data_path("sd15-mini/modules.safetensors"));
    Tensor sample = ref.load("unet.sq.sample"), context = ref.load("unet.sq.context"),
           timestep = ref.load("unet.sq.timestep");
    UNetInputs in;
    in.sample = &sample;
    in.context = &context;
    in.timesteps = &timestep;
    // q4_K falls back to q5_0 on this model's widths (none is a multiple of 256): q8_0, q4_1 (scale and minimum)
    // and q5_0 (fifth bits) run on the device here; the k-quants' decoders are tested in block_weights_test.cpp.
    // The CPU's products of q8_0 dequantized, as the devices' (not int8: ops/cpu_q8_products.h).
    const ops::ScopedCpuQ8Products exact(ops::CpuQ8Products::Dequantize);
    for (DType format : {DType::Q8_0, DType::Q4_1, DType::Q4_K}) {
        const StableDiffusionModel cpu = load(Device{}, DType::F32, format);
        const Tensor want = cpu.unet->forward(in);
        for (DType t : kiln::test::gpu_dtypes(gpu)) {
            const StableDiffusionModel dev = load(gpu.device(), t, format);
            Tensor ds = sample.to_device(gpu, t), dc = context.to_device(gpu, t),
                   dt = timestep.to_device(gpu, DType::F32);
            const UNetInputs din{&ds, &dt, &dc, nullptr, nullptr};
            const Tensor got = dev.unet->forward(din).to_host();
            const double bound = t == DType::F32 ? 2e-5 : 128 * std::ldexp(1.0, t == DType::F16 ? -11 : -8);
            const double err = kiln::test::relative_error(got, want), l2 = kiln::test::relative_l2_error(got, want);
            std::printf("[ quantized model ] %s %s %-4s unet %.2e (L2 %.2e), bound %.1e\n",
                        device_name(gpu.device()).c_str(), dtype_name(format), dtype_name(t), err, l2, bound);
            EXPECT_LT(err, bound) << dtype_name(format) << " " << dtype_name(t);
            EXPECT_LT(l2, bound) << dtype_name(format) << " " << dtype_name(t);
        }
    }
}
