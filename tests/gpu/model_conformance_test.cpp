// The fixture models (tests/data: SD1-, SD2- and SDXL-shaped minis, both file layouts) on each GPU backend
// against the CPU's float32 results: each module (text encoder, UNet, VAE decode) and whole txt2img runs
// with every sampler. Run once per GPU device (lavapipe's Vulkan in CI); none without one.
//
// Bounds, on the error relative to the reference's scale (max |a - b| / max |b|, common/fixtures.h):
//  - float32 on the GPU differs from the CPU only by summation order, as the CPU differs from diffusers
//    (tests/models, tests/pipeline): the same 2e-5 per module and 3e-5 / 3e-4 for a pipeline's latents / image.
//  - fp16 and bf16 round every op's output to the storage type (u = 2^-11, 2^-8). Along the deepest path of
//    these minis a value passes about 64 such roundings (2 ResNet convs, norms and attention per level, up
//    and down), each adding at most u of relative error to first order with unit gain: 64 u, i.e. 3.1e-2 for
//    fp16 and 0.25 for bf16, the same derivation at bf16's coarser u. The argument holds as well for the
//    whole tensor's L2 norm (each rounding moves it by at most u of its size), and a module is held to both:
//    the L2 bound is what says that the output as a whole, not only its largest value, is right.
//  - A whole txt2img run in fp16 has no useful derived bound: 5 steps of guidance 7.5 amplify each call's
//    64 u by up to 2 * 7.5 - 1 = 14 and add them up, past 1. It is held instead to the same picture: a PSNR
//    of 40 dB against the float32 image, an RMS difference of 1% of the [0, 1] range (2.6 levels of the
//    8-bit PNG), about the eye's contrast threshold. fp16 rounding leaves these images at 52-68 dB on
//    lavapipe; a wrong fp16 kernel (a lost scale, a bad tile, an overflow) moves them by tens of levels.
#include <gtest/gtest.h>

#include <cmath>
#include <iterator>

#include "common/fixtures.h"
#include "gpu_test_util.h"
#include "io/safetensors.h"
#include "ops/ops.h"
#include "pipeline/generate.h"

using namespace kiln;
using kiln::test::data_path;

namespace {

struct ModelCase {
    std::string model;
    bool single_file;
};

std::vector<ModelCase> model_cases() {
    std::vector<ModelCase> out;
    for (const char* m : {"sd15-mini", "sd2-mini", "sdxl-mini"})
        for (bool single : {false, true}) out.push_back({m, single});
    return out;
}

std::string case_name(const ModelCase& c) { return c.model + (c.single_file ? " single file" : " diffusers"); }

StableDiffusionModel load_on(const ModelCase& c, Device device, DType precision) {
    LoadOptions o;
    if (c.single_file && c.model == "sd2-mini") o.prediction = "v_prediction";
    o.device = device;
    o.precision = precision;
    return load_model(data_path(c.model + (c.single_file ? "/" + c.model + ".safetensors" : "/diffusers")), o);
}

// On a device that runs on the CPU (lavapipe, in CI) the whole product of model cases and samplers would take
// most of an hour on 2 cores; there each sampler runs on one model case in turn (every sampler and every case
// still run). A real GPU runs them all.
bool runs(const Backend& gpu, size_t model_case, size_t sampler, size_t cases) {
    return !gpu.describe().emulated || sampler % cases == model_case;
}

// Peak signal-to-noise ratio of an image in [0, 1] against a reference, in dB (NaN compares as a failure).
double psnr(const Tensor& image, const Tensor& reference) {
    double d = 0;
    for (int64_t i = 0; i < image.numel(); ++i) {
        const double e = double(image[i]) - reference[i];
        d += e * e;
    }
    return std::isnan(d) ? -INFINITY : 10 * std::log10(double(image.numel()) / d);
}
constexpr double kSamePictureDb = 40;

double rounding_bound(DType t) { return t == DType::F32 ? 2e-5 : 64 * (t == DType::F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8)); }

}  // namespace

class Models : public kiln::test::GpuTest {};
KILN_GPU_TEST_SUITE(Models);

TEST_P(Models, ModulesMatchTheCpu) {
    Backend* gpu = &this->gpu();
    for (const ModelCase& c : model_cases()) {
        const StableDiffusionModel cpu = load_on(c, Device{}, DType::F32);
        SafetensorsFile ref = SafetensorsFile::open(data_path(c.model + "/modules.safetensors"));
        for (DType t : kiln::test::gpu_dtypes(*gpu)) {
            const StableDiffusionModel dev = load_on(c, gpu->device(), t);
            const double bound = rounding_bound(t);
            // UNet on the fixture's inputs.
            Tensor sample = ref.load("unet.sq.sample"), context = ref.load("unet.sq.context"),
                   timestep = ref.load("unet.sq.timestep");
            UNetInputs in;
            in.sample = &sample;
            in.context = &context;
            in.timesteps = &timestep;
            Tensor text_embeds, time_ids;
            if (ref.has("unet.sq.text_embeds")) {
                text_embeds = ref.load("unet.sq.text_embeds");
                time_ids = ref.load("unet.sq.time_ids");
                in.text_embeds = &text_embeds;
                in.time_ids = &time_ids;
            }
            const Tensor want = cpu.unet->forward(in);
            Tensor ds = sample.to_device(*gpu, t), dc = context.to_device(*gpu, t), dt = timestep.to_device(*gpu, DType::F32);
            Tensor de, di;
            UNetInputs din{&ds, &dt, &dc, nullptr, nullptr};
            if (in.text_embeds) {
                de = text_embeds.to_device(*gpu, t);
                di = time_ids.to_device(*gpu, DType::F32);
                din.text_embeds = &de;
                din.time_ids = &di;
            }
            const Tensor unet = dev.unet->forward(din).to_host();
            // VAE decode and the text encoder.
            Tensor latents = ref.load("vae.sq.latent");
            const Tensor vae = dev.vae->decode(latents).to_host(), vae_want = cpu.vae->decode(latents);
            std::vector<int> ids(77, 0);
            for (int i = 0; i < 77; ++i) ids[i] = (i * 37 + 5) % 1000;
            const Tensor text = dev.text_encoders[0].model.encode(ids).last_hidden_state;
            const Tensor text_want = cpu.text_encoders[0].model.encode(ids).last_hidden_state;
            using kiln::test::relative_error, kiln::test::relative_l2_error;
            const double unet_err = relative_error(unet, want), unet_l2 = relative_l2_error(unet, want);
            const double vae_err = relative_error(vae, vae_want), vae_l2 = relative_l2_error(vae, vae_want);
            const double text_err = relative_error(text, text_want), text_l2 = relative_l2_error(text, text_want);
            std::printf("[ models %s ] %-24s %-4s unet %.2e (L2 %.2e) vae %.2e (%.2e) text %.2e (%.2e), "
                        "bound %.1e\n",
                        device_name(gpu->device()).c_str(), case_name(c).c_str(), dtype_name(t), unet_err, unet_l2,
                        vae_err, vae_l2, text_err, text_l2, bound);
            EXPECT_LT(unet_err, bound) << case_name(c) << " " << dtype_name(t);
            EXPECT_LT(unet_l2, bound) << case_name(c) << " " << dtype_name(t);
            EXPECT_LT(text_err, bound) << case_name(c) << " " << dtype_name(t);
            EXPECT_LT(text_l2, bound) << case_name(c) << " " << dtype_name(t);
            // SDXL's VAE runs in its own precision under fp16: bfloat16 where the device has it (its bound), else
            // float32 with TF32 products (10-bit mantissa, as fp16's: the fp16 bound).
            LoadOptions placed;
            placed.device = gpu->device();
            placed.precision = t;
            const DType vae_type = device_precision(placed, dev.arch, true);
            const double vae_bound = vae_type == DType::BF16 ? rounding_bound(DType::BF16) : bound;
            const std::string vae_case = case_name(c) + " " + dtype_name(t) + " (VAE in " + dtype_name(vae_type) + ")";
            EXPECT_LT(vae_err, vae_bound) << vae_case;
            EXPECT_LT(vae_l2, vae_bound) << vae_case;
        }
    }
}

// The tiled VAE decode (bands of 2 rows, the most seams) on the GPU against the CPU's untiled float32 decode.
// Composed on a GPU without a fused form, it rounds what the untiled composition rounds (GroupNorm's output,
// SiLU's, each convolution's) and one more thing: the per-channel scale and shift of each GroupNorm, stored in
// the device's dtype. That is one more relative rounding per norm on the deepest path, about 30 norms
// (2 per ResNet block, 3 blocks a level, 4 levels, the mid block's and the output's): 64 u + 30 u, within
// 1.5 times the module bound above.
TEST_P(Models, TiledVaeDecodeMatchesTheCpu) {
    Backend* gpu = &this->gpu();
    for (const char* model : {"sd15-mini", "sdxl-mini"}) {
        const ModelCase c{model, false};
        const StableDiffusionModel cpu = load_on(c, Device{}, DType::F32);
        SafetensorsFile ref = SafetensorsFile::open(data_path(c.model + "/modules.safetensors"));
        const Tensor latents = ref.load("vae.wide.latent"), want = cpu.vae->decode(latents);
        for (DType t : kiln::test::gpu_dtypes(*gpu)) {
            const StableDiffusionModel dev = load_on(c, gpu->device(), t);
            LoadOptions placed;
            placed.device = gpu->device();
            placed.precision = t;
            const DType vae_type = device_precision(placed, dev.arch, true);
            const double bound = 1.5 * rounding_bound(vae_type == DType::BF16 ? DType::BF16 : t);
            // The activations between bands on the host, or on the GPU (SDXL's only there: lavapipe is slow).
            for (bool park_on_device : {false, true}) {
                if (!park_on_device && c.model == "sdxl-mini") continue;
                const Tensor tiled = dev.vae->decode_tiled(latents, 1, park_on_device);
                using kiln::test::relative_error, kiln::test::relative_l2_error;
                const double err = relative_error(tiled, want), l2 = relative_l2_error(tiled, want);
                const char* where = park_on_device ? "parked on the GPU" : "parked on the host";
                std::printf("[ models %s ] %-24s %-4s tiled VAE decode, %s: %.2e (L2 %.2e), bound %.1e\n",
                            device_name(gpu->device()).c_str(), case_name(c).c_str(), dtype_name(t), where, err, l2,
                            bound);
                EXPECT_LT(err, bound) << case_name(c) << " " << dtype_name(t) << " " << where;
                EXPECT_LT(l2, bound) << case_name(c) << " " << dtype_name(t) << " " << where;
            }
        }
    }
}

// The text encoder runs its layers as a recorded call on a GPU (eager the first time, captured the second,
// replayed after): four different prompt batches in a row, each output against the CPU, for clip skip 1 and 2.
TEST_P(Models, TextEncoderRecordingsMatchTheCpu) {
    Backend* gpu = &this->gpu();
    for (const char* model : {"sd15-mini", "sdxl-mini"}) {
        const ModelCase c{model, false};
        const StableDiffusionModel cpu = load_on(c, Device{}, DType::F32);
        for (DType t : kiln::test::gpu_dtypes(*gpu)) {
            const StableDiffusionModel dev = load_on(c, gpu->device(), t);
            const double bound = rounding_bound(t);
            for (int skip : {1, 2})
                for (int call = 0; call < 4; ++call) {
                    std::vector<std::vector<int>> ids(2, std::vector<int>(77));
                    for (int r = 0; r < 2; ++r)
                        for (int i = 0; i < 77; ++i) ids[r][i] = (i * 37 + 11 * call + 5 * r + skip) % 1000;
                    for (size_t e = 0; e < dev.text_encoders.size(); ++e) {
                        const ClipTextOutput got = dev.text_encoders[e].model.encode(ids, skip);
                        const ClipTextOutput want = cpu.text_encoders[e].model.encode(ids, skip);
                        const std::string what = case_name(c) + " " + dtype_name(t) + " encoder " + std::to_string(e) +
                                                 " skip " + std::to_string(skip) + " call " + std::to_string(call);
                        EXPECT_LT(kiln::test::relative_error(got.last_hidden_state, want.last_hidden_state), bound)
                            << what;
                        EXPECT_LT(kiln::test::relative_error(got.penultimate, want.penultimate), bound) << what;
                        EXPECT_LT(kiln::test::relative_error(got.pooled, want.pooled), bound) << what;
                    }
                }
        }
    }
}

TEST_P(Models, Txt2imgEverySamplerMatchesTheCpu) {
    Backend* gpu = &this->gpu();
    const std::vector<ModelCase> cases = model_cases();
    const char* samplers[] = {"ddim", "pndm", "euler", "euler_a", "heun", "lms", "dpmpp_2m", "unipc", "lcm"};
    for (size_t ci = 0; ci < cases.size(); ++ci) {
        const ModelCase& c = cases[ci];
        const StableDiffusionModel cpu = load_on(c, Device{}, DType::F32);
        const StableDiffusionModel f32 = load_on(c, gpu->device(), DType::F32);
        const bool has_f16 = gpu->supports(DType::F16);
        const StableDiffusionModel f16 = load_on(c, has_f16 ? gpu->device() : Device{}, has_f16 ? DType::F16 : DType::F32);
        for (size_t si = 0; si < std::size(samplers); ++si) {
            if (!runs(*gpu, ci, si, cases.size())) continue;
            const char* sampler = samplers[si];
            GenerationRequest r;
            r.prompt = "a red circle";
            r.negative_prompt = "blue";
            r.width = 64;
            r.height = 48;  // non-square, as users call it
            r.steps = 5;
            r.seed = 7;
            r.sampler = sampler;
            const GenerationResult want = generate(cpu, r);
            // TF32 is a process-wide switch of the backend (as PyTorch's allow_tf32), set by the last load.
            gpu->set_fast_float32(false);
            const GenerationResult got = generate(f32, r);
            const double latent_err = kiln::test::relative_error(got.final_latent, want.final_latent);
            const double image_err = kiln::test::relative_error(got.image, want.image);
            EXPECT_LT(latent_err, 3e-5) << case_name(c) << " " << sampler;
            EXPECT_LT(image_err, 3e-4) << case_name(c) << " " << sampler;
            // fp16: the same picture (see the top).
            double half_err = 0, half_db = INFINITY;
            if (has_f16) {
                gpu->set_fast_float32(true);
                const GenerationResult half = generate(f16, r);
                half_err = kiln::test::relative_error(half.image, want.image);
                half_db = psnr(half.image, want.image);
                EXPECT_GE(half_db, kSamePictureDb) << case_name(c) << " " << sampler;
            }
            std::printf("[ txt2img %s ] %-24s %-9s f32 latent %.2e image %.2e | f16 image %.2e, %.1f dB\n",
                        device_name(gpu->device()).c_str(), case_name(c).c_str(), sampler, latent_err, image_err,
                        half_err, half_db);
        }
    }
}

// img2img: the VAE encoder (whose one-sided pad takes a trip to the host) and every sampler's start at a
// strength, on the GPU in float32 against the CPU; bounds as for txt2img.
TEST_P(Models, Img2imgMatchesTheCpu) {
    Backend* gpu = &this->gpu();
    const std::vector<ModelCase> cases = model_cases();
    const char* samplers[] = {"ddim", "euler_a", "dpmpp_2m"};
    for (size_t ci = 0; ci < cases.size(); ++ci) {
        const ModelCase& c = cases[ci];
        const StableDiffusionModel cpu = load_on(c, Device{}, DType::F32);
        const StableDiffusionModel f32 = load_on(c, gpu->device(), DType::F32);
        gpu->set_fast_float32(false);
        Tensor init({1, 3, 48, 64});
        for (int64_t i = 0; i < init.numel(); ++i) init[i] = float((i * 7919) % 256) / 255.0f;  // in [0, 1]
        for (size_t si = 0; si < std::size(samplers); ++si) {
            if (!runs(*gpu, ci % std::size(samplers), si, std::size(samplers))) continue;
            const char* sampler = samplers[si];
            GenerationRequest r;
            r.prompt = "a blue square";
            r.width = 64;
            r.height = 48;
            r.steps = 6;
            r.seed = 11;
            r.sampler = sampler;
            r.init_image = &init;
            r.strength = 0.6;
            const GenerationResult want = generate(cpu, r), got = generate(f32, r);
            const double latent_err = kiln::test::relative_error(got.final_latent, want.final_latent);
            const double image_err = kiln::test::relative_error(got.image, want.image);
            EXPECT_LT(latent_err, 3e-5) << case_name(c) << " " << sampler;
            EXPECT_LT(image_err, 3e-4) << case_name(c) << " " << sampler;
            std::printf("[ img2img %s ] %-24s %-9s f32 latent %.2e image %.2e\n", device_name(gpu->device()).c_str(),
                        case_name(c).c_str(), sampler, latent_err, image_err);
        }
    }
}
