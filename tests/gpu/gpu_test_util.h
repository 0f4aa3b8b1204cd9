// Shared by the tests that run kiln's ops and models on every GPU backend this build has (CUDA, Vulkan)
// against the CPU: each test is instantiated once per device found (cuda_0, vulkan_0, ...), so a machine
// with no GPU runs none of them (CI without a GPU: only lavapipe's Vulkan device, which runs on the CPU).
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/fixtures.h"
#include "core/backend.h"
#include "gpu/linked_backends.h"
#include "pipeline/generate.h"

namespace kiln::test {

// Every device but the CPU: "cuda:0", "vulkan:0", ...
inline std::vector<std::string> gpu_device_names() {
    test::register_linked_backends();
    std::vector<std::string> out;
    for (const DeviceDescription& d : list_devices())
        if (!d.device.is_cpu()) out.push_back(device_name(d.device));
    return out;
}

// A small generation for the fixture models (64x48 pixels, Euler, with guidance): quick on lavapipe too.
inline GenerationRequest small_generation(int steps) {
    GenerationRequest r;
    r.prompt = "a red circle";
    r.negative_prompt = "blue";
    r.width = 64;
    r.height = 48;
    r.steps = steps;
    r.seed = 11;
    r.sampler = "euler";
    return r;
}

// A fixture model's diffusers folder (tests/data) on `device` in float32, its weights loaded off the device where
// `offload` asks (LoadOptions::offload_weights), with the VAE's encoder.
inline StableDiffusionModel load_fixture_f32(const std::string& name, Device device, bool offload) {
    LoadOptions o;
    o.device = device;
    o.precision = DType::F32;
    o.vae_encoder = true;
    o.offload_weights = offload;
    return load_model(data_path(name + "/diffusers"), o);
}

// The dtypes a backend computes in, of F32, F16 and BF16 (Vulkan has no BF16).
inline std::vector<DType> gpu_dtypes(const Backend& b) {
    std::vector<DType> out;
    for (DType t : {DType::F32, DType::F16, DType::BF16})
        if (b.supports(t)) out.push_back(t);
    return out;
}

// A test fixture per device: GetParam() is the device's name, gpu() its backend.
class GpuTest : public ::testing::TestWithParam<std::string> {
protected:
    Backend& gpu() const { return backend_for(parse_device(GetParam())); }
};

// "vulkan:0" -> "vulkan_0" for test names.
inline std::string gpu_test_name(const ::testing::TestParamInfo<std::string>& info) {
    std::string s = info.param;
    for (char& c : s)
        if (c == ':') c = '_';
    return s;
}

}  // namespace kiln::test

// Instantiates suite `fixture` (derived from GpuTest) once per GPU device.
#define KILN_GPU_TEST_SUITE(fixture)                                                                      \
    GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(fixture);                                              \
    INSTANTIATE_TEST_SUITE_P(Devices, fixture, ::testing::ValuesIn(::kiln::test::gpu_device_names()), \
                             ::kiln::test::gpu_test_name)
