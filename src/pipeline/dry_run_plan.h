// The memory plans' figures derived from the ops themselves: a UNet call (and the text encoders, the VAE's whole
// decode) run dry (core/dry_run.h) through the
// model's GPU backend, at the plan's shapes, before anything is allocated. The peak it gives is that of kiln's
// device tensors in the call, the backend's scratch included (a convolution's columns, attention's score blocks,
// split products' partial sums), as a real call at those shapes asks for them. Where the backend has no dry
// run (CUDA so far), the plans keep their fitted figures (gpu_memory_plan.cpp).
#pragma once
#include <cstdint>

#include "models/model.h"

namespace kiln {

// The most bytes of device tensors one UNet call of `rows` rows of width x height images holds at once, its
// inputs (latents, timesteps, a 77-token context, SDXL's pooled embeddings and time ids) and output included;
// -1 where the model is on the CPU, its backend has no dry run, or the call cannot run whole (an operand past
// what one kernel may read).
int64_t unet_call_peak_bytes(const StableDiffusionModel& model, int width, int height, int rows);

// A streamed UNet call (UNet::stream_in / stream_out, under a --vram plan's Streamed placement) at the same shapes:
// the most bytes it holds at once, split at that moment into the streamed blocks' weights on the device and the
// call's tensors. The dry call replays the streaming in its block hooks: each block's weights from the start of
// the block before it (fetched ahead) to the end of its own, the first block's from the last block of the call
// before, as the streaming does from its second call on. The largest blocks and the largest activations are
// seldom live at once, so this is below the two largest blocks plus the call's peak. What no block owns (always
// on the device) is in neither part. Both -1 where unet_call_peak_bytes gives -1.
struct StreamedCallPeak {
    int64_t blocks = -1;       // the streamed blocks' weights on the device at the peak
    int64_t activations = -1;  // the call's tensors then
    int64_t call = -1;         // the call's peak without streaming (unet_call_peak_bytes), from its first dry pass
};
StreamedCallPeak streamed_unet_call_peak(const StableDiffusionModel& model, int width, int height, int rows);

// The same for the text encoders: each encodes `rows` texts of 77 tokens in one batch (a prompt's AND parts and
// the negative, as prompt_encoding.cpp batches them), one encoder after the other; the larger of their peaks.
int64_t text_encode_peak_bytes(const StableDiffusionModel& model, int rows);

// The same for the VAE's whole decode of `batch` width x height images, the latents included.
int64_t vae_decode_peak_bytes(const StableDiffusionModel& model, int width, int height, int batch);

}  // namespace kiln
