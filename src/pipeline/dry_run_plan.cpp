#include "pipeline/dry_run_plan.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "core/backend.h"
#include "core/dry_run.h"
#include "kiln/error.h"

namespace kiln {

namespace {

// Runs `pass` dry on the model's backend, its tensors made inside it: its peak, or -1 where the backend has no dry
// run, or where the pass ran out (an operand past what one kernel may read, VulkanDeviceOps::bind: the work cannot
// run whole at that size, which the plans' fitted figures and the run itself then say).
int64_t dry_peak(const StableDiffusionModel& model, const std::function<void(Backend&)>& pass) {
    if (model.device.is_cpu()) return -1;
    Backend& backend = backend_for(model.device);
    DryRun dry(backend);
    if (!dry.running()) return -1;
    try {
        pass(backend);
    } catch (const Error& e) {
        if (e.kind() == ErrorKind::OutOfMemory) return -1;
        throw;
    }
    return dry.peak_bytes();
}

}  // namespace

int64_t unet_call_peak_bytes(const StableDiffusionModel& model, int width, int height, int rows) {
    if (!model.unet) return -1;
    return dry_peak(model, [&](Backend& backend) {
        const UNetConfig& c = model.unet->config();
        const DType dtype = model.precision;
        const Tensor sample = Tensor::empty_on(backend, {rows, c.in_channels, height / 8, width / 8}, dtype);
        const Tensor timesteps = Tensor::empty_on(backend, {rows}, DType::F32);
        const Tensor context = Tensor::empty_on(backend, {rows, 77, c.cross_attention_dim}, dtype);
        UNetInputs in{&sample, &timesteps, &context};
        Tensor text_embeds, time_ids;
        if (c.addition_time_embed_dim > 0) {  // SDXL: the pooled text embedding and the six size conditions
            text_embeds = Tensor::empty_on(
                backend, {rows, c.projection_class_embeddings_input_dim - 6 * c.addition_time_embed_dim}, dtype);
            time_ids = Tensor::empty_on(backend, {rows, 6}, DType::F32);
            in.text_embeds = &text_embeds;
            in.time_ids = &time_ids;
        }
        (void)model.unet->forward(in);
    });
}

int64_t text_encode_peak_bytes(const StableDiffusionModel& model, int rows) {
    if (model.text_encoders.empty()) return -1;
    int64_t most = 0;
    for (const TextEncoder& te : model.text_encoders) {  // one after the other: each one's peak alone
        const int64_t peak = dry_peak(model, [&](Backend&) {
            (void)te.model.encode(std::vector<std::vector<int>>(size_t(rows), std::vector<int>(77, 0)));
        });
        if (peak < 0) return -1;
        most = std::max(most, peak);
    }
    return most;
}

int64_t vae_decode_peak_bytes(const StableDiffusionModel& model, int width, int height, int batch) {
    if (!model.vae) return -1;
    return dry_peak(model, [&](Backend& backend) {
        const VaeConfig& c = model.vae->config();
        const int f = c.downsample_factor();
        const Tensor latents = Tensor::empty_on(backend, {batch, c.latent_channels, height / f, width / f},
                                                model.vae->weight_dtype());
        (void)model.vae->decode(latents);
    });
}

}  // namespace kiln
