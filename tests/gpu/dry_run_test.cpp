// A UNet call, the text encoders and a VAE decode run dry (core/dry_run.h, pipeline/dry_run_plan.h): the backend counts what its ops ask for and runs
// nothing. Its peak must be what a real call at those shapes holds, since the memory plans take it for the denoise
// stage (gpu_memory_plan.cpp), and it must leave no trace: no device memory taken, no accounting, no weight
// moved, no cached tensor a real call would then read. Run once per GPU device (lavapipe's Vulkan in CI); skipped
// where the backend has no dry run (CUDA so far).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "common/fixtures.h"
#include "core/dry_run.h"
#include "core/memory.h"
#include "gpu_test_util.h"
#include "pipeline/dry_run_plan.h"
#include "pipeline/generate.h"
#include "pipeline/gpu_memory_plan.h"
#if KILN_HAS_VULKAN
#include "backends/vulkan/vulkan_backend.h"
#endif

using namespace kiln;
using kiln::test::data_path;

namespace {


struct CallInputs {
    Tensor sample, timesteps, context, text_embeds, time_ids;
};

// Host inputs of one UNet call of `rows` rows at width x height, the values arbitrary but fixed.
CallInputs host_inputs(const UNetConfig& c, int width, int height, int rows) {
    CallInputs h;
    h.sample = Tensor({rows, c.in_channels, height / 8, width / 8});
    for (int64_t i = 0; i < h.sample.numel(); ++i) h.sample[i] = float(i % 13) / 6.0f - 1.0f;
    h.timesteps = Tensor({rows}, std::vector<float>(size_t(rows), 421.0f));
    h.context = Tensor({rows, 77, c.cross_attention_dim});
    for (int64_t i = 0; i < h.context.numel(); ++i) h.context[i] = float(i % 7) / 3.0f - 1.0f;
    if (c.addition_time_embed_dim > 0) {
        h.text_embeds = Tensor({rows, c.projection_class_embeddings_input_dim - 6 * c.addition_time_embed_dim});
        for (int64_t i = 0; i < h.text_embeds.numel(); ++i) h.text_embeds[i] = float(i % 5) / 2.0f - 1.0f;
        h.time_ids = Tensor({rows, 6}, std::vector<float>(size_t(rows) * 6, 64.0f));
    }
    return h;
}

UNetInputs inputs_of(const CallInputs& x) {
    UNetInputs in{&x.sample, &x.timesteps, &x.context};
    if (!x.text_embeds.empty()) in.text_embeds = &x.text_embeds, in.time_ids = &x.time_ids;
    return in;
}

int64_t device_bytes_now(const Backend& gpu) {
    return memory_stats().device(device_name(gpu.device())).total.current;
}

// The most bytes of device tensors `work` holds beyond what was held before it, what it makes included; of its
// `runs`-th run (the first times the products' builds, which a dry run does not).
int64_t real_peak(Backend& gpu, const std::function<void()>& work, int runs = 2) {
    const MemoryDevice device = memory_device(device_name(gpu.device()));
    int64_t peak = 0;
    for (int run = 0; run < runs; ++run) {
        const int64_t before = device_bytes_now(gpu);
        reset_memory_window(device);
        work();
        peak = memory_window_peak(device) - before;
    }
    return peak;
}

CallInputs upload(Backend& gpu, const CallInputs& host) {
    CallInputs d;
    d.sample = host.sample.to_device(gpu, DType::F32);
    d.timesteps = host.timesteps.to_device(gpu, DType::F32);
    d.context = host.context.to_device(gpu, DType::F32);
    if (!host.text_embeds.empty()) {
        d.text_embeds = host.text_embeds.to_device(gpu, DType::F32);
        d.time_ids = host.time_ids.to_device(gpu, DType::F32);
    }
    return d;
}

// A real UNet call's peak (real_peak), its inputs uploaded inside it.
int64_t real_call_peak(const StableDiffusionModel& m, Backend& gpu, const CallInputs& host) {
    return real_peak(gpu, [&] { (void)m.unet->forward(inputs_of(upload(gpu, host))).to_host(); });
}

// A real streamed UNet call's peak of kiln's device tensors, the weights the streaming holds included, measured as
// KILN_PLAN_CHECK measures the denoise stage (generate.cpp: the window of the device's total since the stage's
// weights were placed), less what the device held before the placement. Of the third call: the second learns that
// the first block follows the last (UNet::stream_in), so from its end on the first block is fetched ahead.
int64_t real_streamed_call_peak(const StableDiffusionModel& m, Backend& gpu, const CallInputs& host) {
    const MemoryDevice device = memory_device(device_name(gpu.device()));
    const int64_t before = device_bytes_now(gpu);
    m.unet->place_for_streaming();
    const std::function<void(const std::string&)> bring = [&](const std::string& b) { m.unet->stream_in(b); };
    const std::function<void(const std::string&)> send = [&](const std::string& b) { m.unet->stream_out(b); };
    int64_t peak = 0;
    for (int call = 0; call < 3; ++call) {
        reset_memory_window(device);
        const CallInputs d = upload(gpu, host);
        UNetInputs in = inputs_of(d);
        in.before_block = &bring;
        in.after_block = &send;
        (void)m.unet->forward(in).to_host();
        peak = memory_window_peak(device) - before;
    }
    return peak;
}

// The Streamed plan's denoise stage for `batch` images of two UNet rows each (guidance).
StageEstimate streamed_denoise(const StableDiffusionModel& m, int width, int height, int batch) {
    PlanExtras extras;
    extras.unet_rows_per_image = 2;
    const GpuMemoryPlan p = gpu_memory_plan_with(m, width, height, batch, GpuWeightPlacement::Streamed,
                                                 VaeTiling::Auto, extras);
    for (const StageEstimate& s : p.stages)
        if (s.stage == "denoise") return s;
    return {};
}

// The same for the VAE's whole decode of `batch` images.
int64_t real_decode_peak(const StableDiffusionModel& m, Backend& gpu, int width, int height, int batch) {
    Tensor latents({batch, 4, height / 8, width / 8});
    for (int64_t i = 0; i < latents.numel(); ++i) latents[i] = float(i % 11) / 5.0f - 1.0f;
    return real_peak(gpu, [&] { (void)m.vae->decode(latents.to_device(gpu, DType::F32)).to_host(); });
}

bool has_dry_run(Backend& gpu) {
    DryRun probe(gpu);
    return probe.running();
}

}  // namespace

class DryRunCall : public kiln::test::GpuTest {};
KILN_GPU_TEST_SUITE(DryRunCall);

// The dry call's peak against a real call's at the same shapes, for both UNet families and two sizes: the same
// ops ask for the same tensors in the same order, so the figures are equal. The one freedom is the products'
// build, which a real call picks by timing and a dry one takes as a recording does (run_product): a split
// product's partial sums depend on it, a few KiB next to megabytes of activations, hence 1%.
TEST_P(DryRunCall, PeakIsARealCallsPeak) {
    Backend& gpu = this->gpu();
    if (!has_dry_run(gpu)) GTEST_SKIP() << device_name(gpu.device()) << " has no dry run";
    for (const char* name : {"sd15-mini", "sdxl-mini"}) {
        const StableDiffusionModel m = kiln::test::load_fixture_f32(name, gpu.device(), false);
        for (const auto& [w, h, rows] : {std::tuple{64, 48, 2}, std::tuple{96, 64, 4}}) {
            const int64_t dry = unet_call_peak_bytes(m, w, h, rows);
            const int64_t real = real_call_peak(m, gpu, host_inputs(m.unet->config(), w, h, rows));
            std::printf("[ dry run ] %s %dx%d rows %d: dry %lld bytes, real %lld\n", name, w, h, rows,
                        (long long)dry, (long long)real);
            ASSERT_GT(real, 0);
            EXPECT_NEAR(double(dry), double(real), 0.01 * double(real)) << name << " " << w << "x" << h;
        }
    }
}

// The Streamed plan's denoise figure against a real streamed call's peak, measured as KILN_PLAN_CHECK does: the dry
// call replays the streaming's weights in its block hooks (dry_run_plan.h), so the two are equal but for the
// products' build (1%, as above). Before, the plan added the two largest blocks to the call's peak, which are not
// live at once. Planning moves no weight, whether the UNet is offloaded or placed for streaming.
TEST_P(DryRunCall, StreamedPlanIsARealStreamedCallsPeak) {
    Backend& gpu = this->gpu();
    if (!has_dry_run(gpu)) GTEST_SKIP() << device_name(gpu.device()) << " has no dry run";
    for (const char* name : {"sd15-mini", "sdxl-mini"}) {
        const StableDiffusionModel m = kiln::test::load_fixture_f32(name, gpu.device(), true);
        for (const auto& [w, h, batch] : {std::tuple{64, 48, 1}, std::tuple{96, 64, 2}}) {
            m.unet->device_weights().offload();
            const int64_t counted = device_bytes_now(gpu);
            const StageEstimate planned = streamed_denoise(m, w, h, batch);
            ASSERT_TRUE(planned.derived) << name;
            EXPECT_EQ(m.unet->device_weights().resident_bytes(), 0) << "planning brought a weight to the device";
            EXPECT_EQ(device_bytes_now(gpu), counted) << "planning left device memory counted";
            const int64_t plan = planned.pages + planned.activations;
            const int64_t fitted = m.unet->streamed_device_bytes() + unet_call_peak_bytes(m, w, h, 2 * batch);
            const int64_t real = real_streamed_call_peak(m, gpu, host_inputs(m.unet->config(), w, h, 2 * batch));

            // The same plan while the streaming holds its weights (what no block owns, the first block fetched
            // ahead): the same figure, and the residency untouched.
            const int64_t resident = m.unet->device_weights().resident_bytes();
            const StageEstimate again = streamed_denoise(m, w, h, batch);
            EXPECT_EQ(again.pages + again.activations, plan) << name;
            EXPECT_EQ(m.unet->device_weights().resident_bytes(), resident) << "planning moved a weight";

            std::printf("[ dry run ] %s %dx%d rows %d streamed: plan %lld bytes (weights %lld, activations %lld), "
                        "real %lld; two largest blocks + call peak %lld\n",
                        name, w, h, 2 * batch, (long long)plan, (long long)planned.pages,
                        (long long)planned.activations, (long long)real, (long long)fitted);
            ASSERT_GT(real, 0);
            EXPECT_NEAR(double(plan), double(real), 0.01 * double(real)) << name << " " << w << "x" << h;
            EXPECT_LE(plan, fitted) << name;
        }
    }
}

// The stage's figure against what KILN_PLAN_CHECK measures in a generation (generate.cpp: the peak of kiln's device
// tensors from the placement of the denoise stage's weights to the next stage), under the Streamed placement, for
// both UNet families: the line's bytes. The generation holds a few dozen bytes beside its calls that the plan does
// not count (measured: 32 on sd15-mini, 48 on sdxl-mini), and its first call times the products' builds: 1%.
TEST_P(DryRunCall, StreamedGenerationsDenoiseIsThePlans) {
    Backend& gpu = this->gpu();
    if (!has_dry_run(gpu)) GTEST_SKIP() << device_name(gpu.device()) << " has no dry run";
    for (const char* name : {"sd15-mini", "sdxl-mini"}) {
        const StableDiffusionModel m = kiln::test::load_fixture_f32(name, gpu.device(), true);
        GenerationRequest r = kiln::test::small_generation(2);
        r.gpu_weights = "streamed";
        setenv("KILN_PLAN_CHECK", "1", 1);
        testing::internal::CaptureStderr();
        (void)generate(m, r);
        const std::string err = testing::internal::GetCapturedStderr();
        unsetenv("KILN_PLAN_CHECK");
        const size_t line = err.find("kiln plan check: denoise");
        ASSERT_NE(line, std::string::npos) << err;
        const size_t bytes = err.find("(bytes: ", line);
        ASSERT_NE(bytes, std::string::npos) << err;
        long long measured = 0, predicted = 0;
        ASSERT_EQ(std::sscanf(err.c_str() + bytes, "(bytes: %lld, %lld)", &measured, &predicted), 2) << err;
        std::printf("[ dry run ] %s generation 64x48 streamed, denoise: measured %lld bytes, predicted %lld\n", name,
                    measured, predicted);
        ASSERT_GT(measured, 0);
        EXPECT_NEAR(double(predicted), double(measured), 0.01 * double(measured)) << err;
    }
}

// The VAE's whole decode, run dry and for real: equal for the same reason (its products and convolutions too).
TEST_P(DryRunCall, DecodePeakIsARealDecodesPeak) {
    Backend& gpu = this->gpu();
    const StableDiffusionModel m = kiln::test::load_fixture_f32("sd15-mini", gpu.device(), false);
    for (const auto& [w, h, batch] : {std::tuple{64, 48, 1}, std::tuple{96, 64, 2}}) {
        const int64_t dry = vae_decode_peak_bytes(m, w, h, batch);
        if (dry < 0) GTEST_SKIP() << device_name(gpu.device()) << " has no dry run";
        const int64_t real = real_decode_peak(m, gpu, w, h, batch);
        std::printf("[ dry run ] VAE decode %dx%d batch %d: dry %lld bytes, real %lld\n", w, h, batch, (long long)dry,
                    (long long)real);
        ASSERT_GT(real, 0);
        EXPECT_NEAR(double(dry), double(real), 0.01 * double(real)) << w << "x" << h << " batch " << batch;
    }
}

// The text encoders, run dry and for real: each encoder's first encoding of the shape (the second is recorded), with
// the products' build fixed on Vulkan, since a first call that times the builds holds a trial output besides.
TEST_P(DryRunCall, TextEncodePeakIsARealEncodingsPeak) {
    Backend& gpu = this->gpu();
#if KILN_HAS_VULKAN
    auto* vk = dynamic_cast<vulkan::VulkanBackend*>(&gpu);
    const auto products = vk ? vk->products() : vulkan::VulkanBackend::Products::Measured;
    if (vk) vk->set_products(vulkan::VulkanBackend::Products::Small);
#endif
    for (const char* name : {"sd15-mini", "sdxl-mini"}) {
        const StableDiffusionModel m = kiln::test::load_fixture_f32(name, gpu.device(), false);
        const int64_t dry = text_encode_peak_bytes(m, 2);
        if (dry < 0) GTEST_SKIP() << device_name(gpu.device()) << " has no dry run";
        int64_t real = 0;
        for (const TextEncoder& te : m.text_encoders)
            real = std::max(real, real_peak(gpu, [&] {
                (void)te.model.encode(std::vector<std::vector<int>>(2, std::vector<int>(77, 0)));
            }, 1));
        std::printf("[ dry run ] %s text encoders, 2 rows: dry %lld bytes, real %lld\n", name, (long long)dry,
                    (long long)real);
        ASSERT_GT(real, 0);
        EXPECT_NEAR(double(dry), double(real), 0.01 * double(real)) << name;
    }
#if KILN_HAS_VULKAN
    if (vk) vk->set_products(products);
#endif
}

// Nothing of the dry run stays: no device memory, nothing counted, offloaded weights still off the device, and a
// real call afterwards (its timestep frequencies first made inside the dry run, so not cached from it) computes
// what the CPU computes, within the float32 bound of model_conformance_test.cpp.
TEST_P(DryRunCall, LeavesNoTrace) {
    Backend& gpu = this->gpu();
    const StableDiffusionModel moving = kiln::test::load_fixture_f32("sd15-mini", gpu.device(), true);
    const int64_t reserved = gpu.reserved_bytes(), counted = device_bytes_now(gpu);
    const int64_t peak = unet_call_peak_bytes(moving, 64, 48, 2);
    if (peak < 0) GTEST_SKIP() << device_name(gpu.device()) << " has no dry run";
    EXPECT_GT(peak, 0);
    EXPECT_EQ(gpu.reserved_bytes(), reserved) << "the dry run took device memory";
    EXPECT_EQ(device_bytes_now(gpu), counted) << "the dry run's tensors were counted as kiln's memory";
    EXPECT_EQ(moving.unet->device_weights().resident_bytes(), 0) << "a weight came to the device";

    const StableDiffusionModel resident = kiln::test::load_fixture_f32("sd15-mini", gpu.device(), false);
    const CallInputs host = host_inputs(resident.unet->config(), 64, 48, 2);
    CallInputs d;
    d.sample = host.sample.to_device(gpu, DType::F32);
    d.timesteps = host.timesteps.to_device(gpu, DType::F32);
    d.context = host.context.to_device(gpu, DType::F32);
    const Tensor got = resident.unet->forward(inputs_of(d)).to_host();
    LoadOptions cpu_options;
    cpu_options.device = Device{};
    const StableDiffusionModel cpu = load_model(data_path("sd15-mini/diffusers"), cpu_options);
    const Tensor want = cpu.unet->forward(inputs_of(host));
    EXPECT_LT(kiln::test::relative_error(got, want), 2e-5);
}

// Block weights (q4_K; q5_0 where sd15-mini's rows are too short: formats every backend widens, where Vulkan may
// read q8_0 in its products) off the device: the dry call widens each for its product (DeviceWeight) without reading it,
// so planning a streamed run moves no weight and does not fail; and its peak is a real call's with the weights
// resident, the transient weights included (1% as above).
TEST_P(DryRunCall, OffloadedBlockWeightsStayOffloaded) {
    Backend& gpu = this->gpu();
    if (!has_dry_run(gpu)) GTEST_SKIP() << device_name(gpu.device()) << " has no dry run";
    if (!gpu.supports(DType::Q4_K)) GTEST_SKIP() << device_name(gpu.device()) << " takes no q4_K blocks";
    LoadOptions o;
    o.device = gpu.device();
    o.precision = DType::F32;
    o.weights = DType::Q4_K;
    o.offload_weights = true;
    const StableDiffusionModel moving = load_model(data_path("sd15-mini/diffusers"), o);
    const int64_t dry = unet_call_peak_bytes(moving, 64, 48, 2);
    const StageEstimate streamed = streamed_denoise(moving, 64, 48, 1);
    EXPECT_EQ(moving.unet->device_weights().resident_bytes(), 0) << "planning brought a weight to the device";
    EXPECT_GT(streamed.total(0), 0);
    o.offload_weights = false;
    const StableDiffusionModel resident = load_model(data_path("sd15-mini/diffusers"), o);
    const int64_t real = real_call_peak(resident, gpu, host_inputs(resident.unet->config(), 64, 48, 2));
    ASSERT_GT(real, 0);
    EXPECT_NEAR(double(dry), double(real), 0.01 * double(real));
}

// The plans take the dry call for the denoise stage and the dry decode for the whole decode where the backend has
// a dry run, and say so.
TEST_P(DryRunCall, PlansTakeTheDryCall) {
    Backend& gpu = this->gpu();
    const StableDiffusionModel m = kiln::test::load_fixture_f32("sd15-mini", gpu.device(), true);
    const int64_t call = unet_call_peak_bytes(m, 128, 96, 2), decode = vae_decode_peak_bytes(m, 128, 96, 1);
    if (call < 0) GTEST_SKIP() << device_name(gpu.device()) << " has no dry run";
    const StreamedCallPeak streamed = streamed_unet_call_peak(m, 128, 96, 2);
    ASSERT_GE(streamed.blocks, 0);
    PlanExtras extras;
    extras.unet_rows_per_image = 2;
    for (const GpuMemoryPlan& p : gpu_memory_plans(m, 128, 96, 1, VaeTiling::Auto, extras)) {
        for (const StageEstimate& s : p.stages) {
            EXPECT_EQ(s.derived, s.stage != "vae_decode" || !p.vae_tiled) << s.stage << "\n" << p.describe();
            if (s.stage == "denoise" && p.weights != GpuWeightPlacement::Streamed) {
                EXPECT_EQ(s.activations, call) << p.describe();
            }
            if (s.stage == "denoise" && p.weights == GpuWeightPlacement::Streamed) {  // the streamed call's
                EXPECT_EQ(s.activations, streamed.activations) << p.describe();
                EXPECT_EQ(s.pages, m.unet->device_weights().bytes() - m.unet->streamed_block_bytes() + streamed.blocks)
                    << p.describe();
            }
            if (s.stage == "vae_decode" && !p.vae_tiled) {
                EXPECT_EQ(s.activations, decode) << p.describe();
            }
        }
        EXPECT_NE(p.describe().find("run dry"), std::string::npos) << p.describe();
    }
}

// A decode whose operands exceed what one kernel may read cannot run whole: the dry run says so (-1) rather than
// failing the plan, which then keeps the fitted figure for it (and the run decodes in bands).
TEST_P(DryRunCall, ADecodeTooLargeForOneKernelIsNotDerived) {
#if KILN_HAS_VULKAN
    auto* vk = dynamic_cast<vulkan::VulkanBackend*>(&this->gpu());
    if (!vk) GTEST_SKIP() << "the binding limit is Vulkan's";
    const StableDiffusionModel m = kiln::test::load_fixture_f32("sd15-mini", vk->device(), true);
    ASSERT_GT(vae_decode_peak_bytes(m, 96, 64, 1), 0);
    vk->memory().set_max_binding(int64_t(64) << 10);  // 64 KiB: the decoded image alone is 72 KiB
    const int64_t dry = vae_decode_peak_bytes(m, 96, 64, 1);
    const std::vector<GpuMemoryPlan> plans = gpu_memory_plans(m, 96, 64, 1, VaeTiling::Off);
    vk->memory().set_max_binding(0);
    EXPECT_EQ(dry, -1);
    for (const GpuMemoryPlan& p : plans)
        for (const StageEstimate& s : p.stages)
            if (s.stage == "vae_decode") {
                EXPECT_FALSE(s.derived) << p.describe();
            }
#else
    GTEST_SKIP() << "no Vulkan in this build";
#endif
}
