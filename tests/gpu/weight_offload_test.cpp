// Weights that leave the device and come back (DeviceBuffer::offload/restore, models/device_weights.h) under a
// --vram budget's plan (pipeline/gpu_memory_plan.h): moving never changes a value, so every placement, the
// UNet streamed block by block included, gives the resident run's latents bit for bit; a recorded call made
// before the weights moved is never replayed after (it would read freed memory). Run once per GPU device
// (lavapipe's Vulkan in CI).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/fixtures.h"
#include "gpu_test_util.h"
#include "kiln/error.h"
#include "pipeline/generate.h"
#include "pipeline/gpu_memory_plan.h"
#include "pipeline/vae_tiling.h"
#include "core/memory.h"
#include "ops/ops.h"
#if KILN_HAS_VULKAN
#include "backends/vulkan/vulkan_backend.h"
#endif

using namespace kiln;
using kiln::test::data_path;

namespace {


bool same_bits(const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), size_t(a.numel()) * 4) == 0;
}

// Three steps: three UNet calls a generation (eager, recorded, replayed).
GenerationRequest small_request() { return kiln::test::small_generation(3); }

}  // namespace

class WeightOffload : public kiln::test::GpuTest {};
KILN_GPU_TEST_SUITE(WeightOffload);

TEST_P(WeightOffload, BufferRoundTripKeepsTheBytes) {
    Backend& gpu = this->gpu();
    std::vector<float> values(1000);
    for (size_t i = 0; i < values.size(); ++i) values[i] = float(i) * 0.37f - 11.0f;
    const Tensor t = Tensor({1000}, values).to_device(gpu, DType::F32);
    const std::shared_ptr<DeviceBuffer>& b = t.device_buffer();
    b->offload();
    EXPECT_FALSE(b->resident());
    try {
        (void)t.device_data();
        ADD_FAILURE() << "an offloaded weight's address was handed out";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    }
    b->restore();
    b->offload();  // the second time from the kept host copy
    b->restore();
    EXPECT_TRUE(b->resident());
    EXPECT_EQ(t.to_host().values(), values);
}

// Tensor::on_buffer (the scratch CUDA's weights are dequantized into ahead, cuda/dequantize_ahead.h): a tensor on
// the front of a larger shared buffer reads what was written there, and a buffer too small is refused.
TEST_P(WeightOffload, TensorOnASharedBuffer) {
    Backend& gpu = this->gpu();
    std::vector<float> values(600);
    for (size_t i = 0; i < values.size(); ++i) values[i] = float(i) * 0.25f - 7.0f;
    const Tensor t = Tensor({600}, values).to_device(gpu, DType::F32);
    const Tensor front = Tensor::on_buffer(t.device_buffer(), {20, 10}, DType::F32);
    EXPECT_EQ(front.device_buffer(), t.device_buffer()) << "shared, not copied";
    EXPECT_EQ(front.to_host().values(), std::vector<float>(values.begin(), values.begin() + 200));
    try {
        (void)Tensor::on_buffer(t.device_buffer(), {601}, DType::F32);
        ADD_FAILURE() << "601 float32 values on a buffer of 600";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    }
}

// Every placement, and the decode in bands, against a model that never moved: the same latents bit for bit
// (the arithmetic is the same; only where the weights wait between uses changes), and the same image.
TEST_P(WeightOffload, EveryPlacementGivesTheResidentLatents) {
    Backend& gpu = this->gpu();
    for (const char* name : {"sd15-mini", "sdxl-mini"}) {
        const StableDiffusionModel resident = kiln::test::load_fixture_f32(name, gpu.device(), false);
        const StableDiffusionModel moving = kiln::test::load_fixture_f32(name, gpu.device(), true);
        EXPECT_EQ(moving.unet->device_weights().resident_bytes(), 0) << name << ": loaded off the device";
        EXPECT_GT(moving.unet->device_weights().bytes(), 0);
        GenerationRequest r = small_request();
        const GenerationResult want = generate(resident, r);
        // Each generation makes three UNet calls: eager, recorded, replayed. So each placement after the first
        // replays a recording, which must have been made after its weights last moved. (On lavapipe, SDXL's
        // second encoder and larger UNet make the sd15 sequence alone worth its time: SDXL runs streamed only.)
        const std::vector<const char*> placements =
            std::string(name) == "sd15-mini" || !gpu.describe().emulated
                ? std::vector<const char*>{"streamed", "each_stage", "stages", "resident", "streamed", "each_stage"}
                : std::vector<const char*>{"streamed"};
        for (const char* placement : placements) {
            r.gpu_weights = placement;
            const GenerationResult got = generate(moving, r);
            EXPECT_TRUE(same_bits(got.final_latent, want.final_latent)) << name << " " << placement;
            EXPECT_TRUE(same_bits(got.image, want.image)) << name << " " << placement;
        }
        // After a streamed run only what no UNet block owns is left on the device, and at most the block fetched
        // ahead for the next call (UNet::stream_in): the rest came and went.
        EXPECT_LT(moving.unet->device_weights().resident_bytes(), moving.unet->streamed_device_bytes()) << name;
    }
}

// A streamed UNet fetches each block's weights while the block before runs (UNet::stream_in, from the order
// its first call showed): in the second call a block's weights are on the device before its own stream_in, the
// device never holds more than streamed_device_bytes(), and the output is the resident UNet's, bit for bit.
// On Vulkan also with the copies in line and on each queue the device has for them (lavapipe: its one queue).
TEST_P(WeightOffload, StreamedBlocksAreFetchedAhead) {
    Backend& gpu = this->gpu();
    const StableDiffusionModel resident = kiln::test::load_fixture_f32("sd15-mini", gpu.device(), false);
    const StableDiffusionModel moving = kiln::test::load_fixture_f32("sd15-mini", gpu.device(), true);
    const UNet& unet = *moving.unet;
    Tensor sample({2, 4, 6, 8}), context({2, 77, unet.config().cross_attention_dim}), t({2});
    for (int64_t i = 0; i < sample.numel(); ++i) sample[i] = float(i % 13) / 6.0f - 1.0f;
    for (int64_t i = 0; i < context.numel(); ++i) context[i] = float(i % 7) / 3.0f - 1.0f;
    t[0] = 500.0f, t[1] = 499.0f;
    const DType dtype = DType::F32;
    const Tensor xd = sample.to_device(gpu, dtype), cd = context.to_device(gpu, dtype), td = t.to_device(gpu, dtype);
    UNetInputs in;
    in.sample = &xd, in.context = &cd, in.timesteps = &td;
    const Tensor want = resident.unet->forward(in).to_host();

    unet.place_for_streaming();
    int ahead = 0, blocks = 0;
    int64_t most = 0;
    const std::function<void(const std::string&)> bring = [&](const std::string& b) {
        if (unet.streamed_block_resident(b)) ++ahead;
        unet.stream_in(b);
        ++blocks;
        EXPECT_TRUE(unet.streamed_block_resident(b)) << b;
        most = std::max(most, unet.device_weights().resident_bytes());
    };
    const std::function<void(const std::string&)> send = [&](const std::string& b) { unet.stream_out(b); };
    in.before_block = &bring, in.after_block = &send;
    const Tensor first = unet.forward(in).to_host();
    EXPECT_EQ(ahead, 0) << "the first call has no order to fetch by";
    // The second call's first block is not fetched ahead (the first call ended before the order wrapped round);
    // in the calls after it every block is (the first at the end of the call before).
    int calls = 1;
    const auto again = [&](const std::string& how) {
        blocks = ahead = 0;
        const Tensor second = unet.forward(in).to_host();
        EXPECT_GT(blocks, 10) << how;
        EXPECT_EQ(ahead, ++calls == 2 ? blocks - 1 : blocks) << how;
        EXPECT_LE(most, unet.streamed_device_bytes()) << how;
        EXPECT_TRUE(same_bits(second, want)) << how;
    };
    EXPECT_TRUE(same_bits(first, want));
    again("ahead");
#if KILN_HAS_VULKAN
    if (auto* vk = dynamic_cast<vulkan::VulkanBackend*>(&gpu)) {
        using Q = vulkan::TransferQueue;
        const Q ran = vk->upload_ahead_queue();  // the call above's (lavapipe: Same, its only queue)
        if (vulkan::upload_ahead_from_env(std::getenv("KILN_VULKAN_UPLOAD_AHEAD"))) {
            EXPECT_NE(ran, Q::Auto) << "copies ahead are off (no timeline semaphores?)";
        }
        for (Q q : {Q::Family, Q::Second, Q::Same}) {
            if (q == ran) continue;
            vk->set_upload_ahead(true, q);
            if (vk->upload_ahead_queue() != q) continue;  // the device has no such queue
            again(std::string("ahead on queue ") + vulkan::transfer_queue_name(q));
        }
        vk->set_upload_ahead(false);
        again("in line");
        vk->set_upload_ahead(vulkan::upload_ahead_from_env(std::getenv("KILN_VULKAN_UPLOAD_AHEAD")),
                             vulkan::transfer_queue_from_env(std::getenv("KILN_VULKAN_TRANSFER_QUEUE")));
    }
#endif
}

// A copy ahead goes into memory just allocated, which work queued before may still read (the allocator hands out
// blocks in the compute stream's order): it waits for that work, and work after wait_for_uploads_ahead() reads
// the copied bytes. A race would show on a GPU whose copies run beside its compute (a product long enough to be
// running when the copy could start); on lavapipe, whose one queue runs in order, it checks the bookkeeping.
TEST_P(WeightOffload, CopyAheadWaitsForTheWorkBeforeIt) {
    Backend& gpu = this->gpu();
    const int64_t n = 1024, rows = gpu.describe().emulated ? 8 : 4096;  // 2 * rows * n * n FLOP
    Tensor a({n, n}), b({n, n}), x({rows, n});
    for (int64_t i = 0; i < a.numel(); ++i) a[i] = float(i % 251) / 125.0f - 1.0f, b[i] = float(i % 241) / 120.0f - 1.0f;
    for (int64_t i = 0; i < x.numel(); ++i) x[i] = float(i % 199) / 99.0f - 1.0f;
    const Tensor xd = x.to_device(gpu, DType::F32);
    Tensor old_w = a.to_device(gpu, DType::F32);
    Tensor new_w = b.to_device(gpu, DType::F32);
    const Tensor want_old = ops::linear(xd, old_w, nullptr).to_host(), want_new = ops::linear(xd, new_w, nullptr).to_host();
    new_w.device_buffer()->offload();
    const Tensor holder = b.to_device(gpu, DType::F32);  // takes new_w's freed block, so old_w's is the one free
    const void* freed = old_w.device_data();
    const Tensor got_old = ops::linear(xd, old_w, nullptr);  // queued, reading old_w
    old_w = Tensor();  // its memory back to the allocator while the product may still read it
    ASSERT_TRUE(new_w.device_buffer()->restore_ahead());
    const bool into_freed = new_w.device_data() == freed;
    gpu.wait_for_uploads_ahead();
    const Tensor got_new = ops::linear(xd, new_w, nullptr);
    EXPECT_TRUE(same_bits(got_old.to_host(), want_old)) << "the copy overwrote a weight still being read";
    EXPECT_TRUE(same_bits(got_new.to_host(), want_new)) << "the product read the weight before its copy landed";
    EXPECT_EQ(new_w.to_host().values(), b.values());
    // Fetched ahead and dropped unused: what reuses the memory is written after the copy, not under it.
    new_w.device_buffer()->offload();
    ASSERT_TRUE(new_w.device_buffer()->restore_ahead());
    const void* dropped = new_w.device_data();
    new_w = Tensor();
    const Tensor reused = a.to_device(gpu, DType::F32);
    SCOPED_TRACE(reused.device_data() == dropped ? "reused the dropped block" : "other memory");
    EXPECT_EQ(reused.to_host().values(), a.values());
    // The checks above pass whatever memory the copy went to; only a copy into old_w's block tests the wait.
    if (!into_freed) GTEST_SKIP() << "the allocator put the copy elsewhere: the race this test is for did not happen";
}

// img2img encodes first: the VAE must be there for its encoder, then leave for the UNet.
TEST_P(WeightOffload, Img2imgUnderEachStage) {
    Backend& gpu = this->gpu();
    const StableDiffusionModel resident = kiln::test::load_fixture_f32("sd15-mini", gpu.device(), false);
    const StableDiffusionModel moving = kiln::test::load_fixture_f32("sd15-mini", gpu.device(), true);
    GenerationRequest r = small_request();
    Tensor init({1, 3, r.height, r.width});
    for (int64_t i = 0; i < init.numel(); ++i) init[i] = float(i % 97) / 96.0f;
    r.init_image = &init;
    r.strength = 0.6;
    const GenerationResult want = generate(resident, r);
    r.gpu_weights = "each_stage";
    EXPECT_TRUE(same_bits(generate(moving, r).final_latent, want.final_latent));
}

// The plans: each stage's weights are what the placement keeps there, and the leaner placements hold less.
TEST_P(WeightOffload, PlansOrderFromFastestToLeanest) {
    const StableDiffusionModel m = kiln::test::load_fixture_f32("sd15-mini", this->gpu().device(), true);
    const std::vector<GpuMemoryPlan> plans = gpu_memory_plans(m, 512, 512, 1, VaeTiling::Off);
    ASSERT_EQ(plans.size(), 4u);
    for (size_t i = 1; i < plans.size(); ++i) EXPECT_LE(plans[i].peak(), plans[i - 1].peak()) << i;
    const int64_t unet = m.unet->device_weights().bytes();
    EXPECT_EQ(plans[0].stages.at(1).pages, m.unet->device_weights().bytes() + m.vae->device_weights().bytes() +
                                               m.text_encoders.at(0).model.device_weights().bytes());
    EXPECT_EQ(plans[2].stages.at(1).pages, unet);
    // A streamed UNet holds what no block owns and, where its call runs dry (dry_run_plan.h), the blocks held at the
    // call's peak (one or two); else the two largest blocks.
    const int64_t streamed_pages = plans[3].stages.at(1).pages;
    if (plans[3].stages.at(1).derived) {
        EXPECT_GT(streamed_pages, unet - m.unet->streamed_block_bytes());
        EXPECT_LE(streamed_pages, m.unet->streamed_device_bytes());
    } else {
        EXPECT_EQ(streamed_pages, m.unet->streamed_device_bytes());
    }
    EXPECT_LT(m.unet->streamed_device_bytes(), unet);
    // What each placement uploads again: the components that leave the device each generation, a streamed UNet's
    // blocks each call (all of it but what no block owns, which stays).
    const int64_t text = m.text_encoders.at(0).model.device_weights().bytes(), vae = m.vae->device_weights().bytes();
    const int64_t blocks = m.unet->streamed_block_bytes();
    EXPECT_GT(blocks, unet / 2);
    EXPECT_LT(blocks, unet);
    const std::vector<std::pair<int64_t, int64_t>> uploads = {
        {0, 0}, {text + vae, 0}, {text + vae + unet, 0}, {text + vae + unet - blocks, blocks}};
    for (size_t i = 0; i < plans.size(); ++i) {
        EXPECT_EQ(plans[i].uploads_per_generation, uploads[i].first) << plans[i].describe();
        EXPECT_EQ(plans[i].uploads_per_unet_call, uploads[i].second) << plans[i].describe();
        EXPECT_EQ(plans[i].describe().find("uploads weights again") != std::string::npos, i > 0) << plans[i].describe();
    }
    // No budget: resident; a budget of the leanest plan's peak: a plan that fits it; below it, one error line
    // naming a budget that does fit.
    EXPECT_EQ(plan_gpu_memory(m, 512, 512, 1, -1).weights, GpuWeightPlacement::Resident);
    const int64_t least = plans.back().peak();
    EXPECT_LE(plan_gpu_memory(m, 512, 512, 1, least, VaeTiling::Off).peak(), least);
    try {
        (void)plan_gpu_memory(m, 512, 512, 1, least / 2, VaeTiling::Off);
        ADD_FAILURE() << "a budget below every plan was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory);
        EXPECT_NE(std::string(e.what()).find("--vram "), std::string::npos) << e.what();
    }
}

// Whether a tiled decode parks its activations on the GPU follows a --vram cap, not the driver's free memory: a cap
// just above what kiln holds leaves no room to park, so the bands park on the host.
TEST_P(WeightOffload, TiledDecodeParksWithinTheCap) {
    Backend& gpu = this->gpu();
    const StableDiffusionModel m = kiln::test::load_fixture_f32("sd15-mini", gpu.device(), false);
    struct Restore {  // the cap as it was, however the test ends
        Backend& gpu;
        int64_t before;
        ~Restore() { gpu.set_memory_limit(before); }
    } restore{gpu, gpu.memory_limit()};
    ASSERT_TRUE(gpu.set_memory_limit(0));
    EXPECT_TRUE(tiled_decode_fits_device(m, 64, 48, 1)) << "no room on an uncapped GPU for a 64x48 decode";
    const int64_t held = memory_stats().device(device_name(gpu.device())).total.current;
    ASSERT_TRUE(gpu.set_memory_limit(held + 1024));
    EXPECT_FALSE(tiled_decode_fits_device(m, 64, 48, 1)) << "parked past the cap";
}

// Bands a --vram budget's plan chose (decode_latents' park_where_it_fits) park on the GPU where they fit: the
// device holds more at its peak than --vae-tiling on's bands, which park on the host, and the image is the same up
// to the statistics' rounding (on the GPU a band's sums are float32 chunks added in double, on the host double
// throughout: ~1e-6 relative in a sum, well under 1e-5 in the image after the decoder's GroupNorms).
TEST_P(WeightOffload, PlannedBandsParkOnTheGpuWhereTheyFit) {
    Backend& gpu = this->gpu();
    const StableDiffusionModel m = kiln::test::load_fixture_f32("sd15-mini", gpu.device(), false);
    Tensor latents({1, 4, 6, 8});
    for (int64_t i = 0; i < latents.numel(); ++i) latents[i] = float(i % 11) / 5.0f - 1.0f;
    const MemoryDevice device = memory_device(device_name(gpu.device()));
    auto decode = [&](bool park_where_it_fits, int64_t& peak) {
        const int64_t before = memory_stats().device(device_name(gpu.device())).total.current;
        reset_memory_window(device);
        std::vector<std::string> notices;
        Tensor image = decode_latents(m, latents, VaeTiling::On,
                                      [&](const std::string& line) { notices.push_back(line); }, 0, park_where_it_fits);
        EXPECT_TRUE(notices.empty()) << notices.front();  // no fallback to the host: the GPU's peak is its own
        peak = memory_window_peak(device) - before;
        return image;
    };
    ASSERT_TRUE(tiled_decode_fits_device(m, 64, 48, 1));
    int64_t host_peak = 0, device_peak = 0;
    const Tensor on_host = decode(false, host_peak);
    const Tensor on_device = decode(true, device_peak);
    EXPECT_GT(device_peak, host_peak) << "the planned bands did not park on the GPU";
    const double error = kiln::test::relative_error(on_device, on_host);
    std::printf("[ bands ] parked on the GPU: peak %lld bytes against %lld on the host; relative difference %.3g\n",
                (long long)device_peak, (long long)host_peak, error);
    EXPECT_LT(error, 1e-5);
}
