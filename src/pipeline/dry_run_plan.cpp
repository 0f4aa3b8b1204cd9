#include "pipeline/dry_run_plan.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/dry_run.h"
#include "kiln/error.h"

namespace kiln {

namespace {

// Runs `pass` dry on the model's backend, its tensors made inside it: its peak, or -1 where the backend has no dry
// run, or where the pass ran out or cannot run at that size (an operand past what one kernel may read,
// VulkanDeviceOps::bind; an op past the workgroup grid): the work cannot run whole at that size, which the plans'
// fitted figures and the run itself then say (the decode falls back to bands).
int64_t dry_peak(const StableDiffusionModel& model, const std::function<void(Backend&)>& pass) {
    if (model.device.is_cpu()) return -1;
    Backend& backend = backend_for(model.device);
    DryRun dry(backend);
    if (!dry.running()) return -1;
    try {
        pass(backend);
    } catch (const Error& e) {
        if (e.kind() == ErrorKind::OutOfMemory || e.kind() == ErrorKind::Unsupported) return -1;
        throw;
    }
    return dry.peak_bytes();
}

using BlockHook = std::function<void(const std::string&)>;

// A UNet call of `rows` rows of width x height images on `backend` (dry), its inputs made inside it, with the
// block hooks given.
void dry_unet_call(const StableDiffusionModel& model, Backend& backend, int width, int height, int rows,
                   const BlockHook* before_block, const BlockHook* after_block) {
    const UNetConfig& c = model.unet->config();
    const DType dtype = model.precision;
    const Tensor sample = Tensor::empty_on(backend, {rows, c.in_channels, height / 8, width / 8}, dtype);
    const Tensor timesteps = Tensor::empty_on(backend, {rows}, DType::F32);
    const Tensor context = Tensor::empty_on(backend, {rows, 77, c.cross_attention_dim}, dtype);
    UNetInputs in{&sample, &timesteps, &context};
    in.before_block = before_block;
    in.after_block = after_block;
    Tensor text_embeds, time_ids;
    if (c.addition_time_embed_dim > 0) {  // SDXL: the pooled text embedding and the six size conditions
        text_embeds = Tensor::empty_on(
            backend, {rows, c.projection_class_embeddings_input_dim - 6 * c.addition_time_embed_dim}, dtype);
        time_ids = Tensor::empty_on(backend, {rows, 6}, DType::F32);
        in.text_embeds = &text_embeds;
        in.time_ids = &time_ids;
    }
    (void)model.unet->forward(in);
}

}  // namespace

int64_t unet_call_peak_bytes(const StableDiffusionModel& model, int width, int height, int rows) {
    if (!model.unet) return -1;
    return dry_peak(model,
                    [&](Backend& backend) { dry_unet_call(model, backend, width, height, rows, nullptr, nullptr); });
}

StreamedCallPeak streamed_unet_call_peak(const StableDiffusionModel& model, int width, int height, int rows) {
    if (!model.unet) return {};
    const std::map<std::string, int64_t> sizes = model.unet->streamed_block_sizes();
    // The blocks in the order a call starts them, from a first dry call, as the streaming learns it in its first
    // call. UNet::stream_in fetches ahead the block whose start came next, even one with no streamed weights.
    std::vector<std::string> order;
    const BlockHook record = [&](const std::string& b) { order.push_back(b); };
    const auto learn = [&](Backend& backend) { dry_unet_call(model, backend, width, height, rows, &record, nullptr); };
    const int64_t call = dry_peak(model, learn);  // the hook allocates nothing: unet_call_peak_bytes's figure
    if (call < 0) return {};
    std::map<std::string, std::string> next;  // the last block's next is the first: fetched for the next call
    for (size_t i = 0; i < order.size(); ++i) next[order[i]] = order[(i + 1) % order.size()];

    // The second call holds each streamed block's weights in a dry buffer of its size, taken and freed where the
    // streaming restores and offloads them. The held set changes only in the hooks, so a rise of the pass's peak
    // seen at a hook happened with the set held since the previous one: that is the peak's weights part.
    StreamedCallPeak out;
    out.call = call;
    const int64_t peak = dry_peak(model, [&](Backend& backend) {
        std::map<std::string, std::unique_ptr<DeviceBuffer>> held;
        int64_t held_bytes = 0, seen = 0;
        auto note = [&] {
            if (const int64_t p = backend.dry_run_peak_bytes(); p > seen) seen = p, out.blocks = held_bytes;
        };
        auto bring = [&](const std::string& b) {
            auto size = sizes.find(b);
            if (size == sizes.end() || held.count(b)) return;
            held[b] = std::make_unique<DeviceBuffer>(backend, size->second);
            held_bytes += size->second;
            note();
        };
        const BlockHook before = [&](const std::string& b) {
            note();
            bring(b);        // where it was not fetched ahead
            bring(next[b]);  // fetched ahead during this block's work
        };
        const BlockHook after = [&](const std::string& b) {
            note();
            if (auto it = held.find(b); it != held.end()) {
                held_bytes -= it->second->bytes();
                held.erase(it);
            }
        };
        if (!order.empty()) bring(order.front());  // fetched ahead during the call before's last block
        dry_unet_call(model, backend, width, height, rows, &before, &after);
        note();
    });
    if (peak < 0 || out.blocks < 0) return {-1, -1, call};
    out.activations = peak - out.blocks;
    return out;
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
