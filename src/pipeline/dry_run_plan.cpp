#include "pipeline/dry_run_plan.h"

#include <algorithm>
#include <vector>

#include "core/backend.h"
#include "core/dry_run.h"
#include "kiln/error.h"

namespace kiln {

int64_t unet_call_peak_bytes(const StableDiffusionModel& model, int width, int height, int rows) {
    if (!model.unet || model.device.is_cpu()) return -1;
    Backend& backend = backend_for(model.device);
    DryRun dry(backend);
    if (!dry.running()) return -1;
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
    try {
        (void)model.unet->forward(in);
    } catch (const Error& e) {
        // An operand past what one kernel may read (VulkanDeviceOps::bind): the call cannot run whole at this
        // size, which the plans' fitted figures and the run itself then say.
        if (e.kind() == ErrorKind::OutOfMemory) return -1;
        throw;
    }
    return dry.peak_bytes();
}

}  // namespace kiln

namespace kiln {

int64_t vae_decode_peak_bytes(const StableDiffusionModel& model, int width, int height, int batch) {
    if (!model.vae || model.device.is_cpu()) return -1;
    Backend& backend = backend_for(model.device);
    DryRun dry(backend);
    if (!dry.running()) return -1;
    const VaeConfig& c = model.vae->config();
    const int f = c.downsample_factor();
    const Tensor latents = Tensor::empty_on(backend, {batch, c.latent_channels, height / f, width / f},
                                            model.vae->weight_dtype());
    try {
        (void)model.vae->decode(latents);
    } catch (const Error& e) {
        if (e.kind() == ErrorKind::OutOfMemory) return -1;  // as above: the decode in bands is the way there
        throw;
    }
    return dry.peak_bytes();
}

}  // namespace kiln

namespace kiln {

int64_t text_encode_peak_bytes(const StableDiffusionModel& model, int rows) {
    if (model.text_encoders.empty() || model.device.is_cpu()) return -1;
    Backend& backend = backend_for(model.device);
    int64_t most = 0;
    for (const TextEncoder& te : model.text_encoders) {
        DryRun dry(backend);
        if (!dry.running()) return -1;
        (void)te.model.encode(std::vector<std::vector<int>>(size_t(rows), std::vector<int>(77, 0)));
        most = std::max(most, dry.peak_bytes());
    }
    return most;
}

}  // namespace kiln
