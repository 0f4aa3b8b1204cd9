// When the VAE decode runs in bands (Vae::decode_tiled) instead of whole: the decode is a run's memory peak (at
// 1024x1024 an SD VAE's last level holds 512 MiB a float32 activation), and a tiled decode gives the same image.
// The encode of an init image (img2img) has the same choice (Vae::encode_tiled): its first level is as large.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "core/tensor.h"
#include "models/model.h"

namespace kiln {

enum class VaeTiling {
    Auto,  // whole where it fits (CPU: by the estimate against free memory; GPU: tried, in bands on out-of-memory)
    On,    // always in bands
    Off,   // always whole
};

// "auto", "on", "off"; anything else is InvalidArgument.
VaeTiling parse_vae_tiling(const std::string& name);
const char* vae_tiling_name(VaeTiling tiling);

// Bytes of a band's tensors: 256 MiB on a GPU (few, large kernels), 64 MiB on the CPU (its convolutions already
// work through the image in tiles).
int64_t default_vae_band_bytes(bool gpu);

// Peak bytes of the decode of `batch` width x height images on the CPU, whole or in bands of the default size.
int64_t estimate_vae_decode_bytes(const StableDiffusionModel& model, int width, int height, int batch, bool tiled);

// The largest single tensor of the whole decode on the model's device, in bytes of the VAE's dtype (an upsampler's
// output at full size): what must fit one allocation (Backend::max_allocation_bytes) for the whole decode to run.
int64_t largest_vae_decode_tensor_bytes(const StableDiffusionModel& model, int width, int height, int batch);

// Whether a tiled decode on the model's GPU keeps its activations there: when the most it parks at once fits in
// half of the device's free memory (under a --vram cap, of what the cap leaves beside kiln's tensors), and its
// largest tensor in one allocation (Vulkan drivers cap it, 4 GiB on NVIDIA's).
bool tiled_decode_fits_device(const StableDiffusionModel& model, int width, int height, int batch);

// The decoded image [N, 3, H, W] on the host (float32, about [-1, 1]) of raw latents (already divided by the VAE
// scale). A batch in bands goes one image at a time; under Auto, on the CPU as many images at a time as fit whole,
// on a GPU one at a time once the whole batch ran out of memory. `notice` hears one line when Auto falls back to bands after the GPU ran out of memory, or goes to bands
// at once because the whole decode's largest tensor is more than one allocation may be. On a GPU the bands'
// tensors stay within that limit too.
// band_bytes > 0 sizes the bands (a --vram budget's plan), else default_vae_band_bytes. Bands park their
// activations on the host, but for `park_where_it_fits` (bands a budget's plan chose, not --vae-tiling on): then
// on the GPU where tiled_decode_fits_device says they fit. Bands parked on the GPU (these, and Auto's) that run
// out of memory all the same park on the host instead, with a notice. `whole_ran_out`, where given, is set when
// Auto's whole decode ran out of device memory. Where it did, `make_room` (where given) is asked to move what the
// decode does not need off the device, and says what it moved ("" for nothing): then the whole decode is tried
// once more before the bands.
Tensor decode_latents(const StableDiffusionModel& model, const Tensor& latents, VaeTiling tiling,
                      const std::function<void(const std::string&)>& notice, int64_t band_bytes = 0,
                      bool park_where_it_fits = false, bool* whole_ran_out = nullptr,
                      const std::function<std::string()>& make_room = nullptr);

// The posterior of images [N, 3, H, W] in [-1, 1] (Vae::encode), whole or in bands (Vae::encode_tiled) as
// `tiling` says; Auto as decode_latents chooses: on the CPU by the estimate against free memory, on a GPU the whole
// encode tried first and bands after it ran out of memory (or at once where its largest tensor exceeds one
// allocation), `notice` hearing one line. band_bytes > 0 sizes the bands, else default_vae_band_bytes.
Vae::Posterior encode_image(const StableDiffusionModel& model, const Tensor& image, VaeTiling tiling,
                            const std::function<void(const std::string&)>& notice, int64_t band_bytes = 0);

}  // namespace kiln
