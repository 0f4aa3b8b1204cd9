#include "pipeline/vae_tiling.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>

#include "core/backend.h"
#include "core/memory.h"
#include "kiln/error.h"
#include "pipeline/memory_check.h"
#include "pipeline/memory_plan.h"

namespace kiln {

VaeTiling parse_vae_tiling(const std::string& name) {
    if (name == "auto") return VaeTiling::Auto;
    if (name == "on") return VaeTiling::On;
    if (name == "off") return VaeTiling::Off;
    fail(ErrorKind::InvalidArgument, "unknown VAE tiling '" + name + "' (auto, on, off)");
}

const char* vae_tiling_name(VaeTiling tiling) {
    switch (tiling) {
        case VaeTiling::Auto: return "auto";
        case VaeTiling::On: return "on";
        case VaeTiling::Off: return "off";
    }
    return "?";
}

int64_t default_vae_band_bytes(bool gpu) { return (gpu ? int64_t(256) : int64_t(64)) << 20; }

int64_t estimate_vae_decode_bytes(const StableDiffusionModel& model, int width, int height, int batch, bool tiled) {
    const int64_t pixels = int64_t(width) * height;
    const int64_t channels = model.vae ? model.vae->config().block_out_channels.at(0) : 128;
    const int64_t activation = channels * pixels * int64_t(sizeof(float));
    // Whole: at most three full-size activations alive at once (the last level's first block: its input, twice
    // as wide, and its output; vae_blocks.cpp) plus scratch: four.
    const int64_t scratch = ops_scratch_bytes();
    if (!tiled || !model.vae) return batch * 4 * activation + scratch;
    // In bands, one image at a time (decode_latents), parked on the host: an upsampler's output is never held
    // (vae_tiled_decode.cpp), so a level's first block holds its parked input (the upsampler's, a quarter of the
    // pixels) and its output; beside them a band, the scratch, and the batch's decoded images.
    const std::vector<int>& ch = model.vae->config().block_out_channels;
    const int levels = int(ch.size());
    int64_t most = 0, prev = ch.back();
    for (int i = 0; i < levels; ++i) {
        const int64_t level_pixels = pixels >> (2 * (levels - 1 - i)), out = ch[size_t(levels - 1 - i)];
        const int64_t input = i == 0 ? prev * level_pixels : prev * (level_pixels / 4);
        const bool new_output = i > 0 || prev != out;
        most = std::max(most, input + (new_output ? out * level_pixels : 0));
        prev = out;
    }
    const int64_t images = int64_t(batch) * model.vae->config().out_channels * pixels;
    return (most + images) * int64_t(sizeof(float)) + default_vae_band_bytes(false) + scratch;
}

namespace {

// What a tiled decode parks, in bytes of `elem`: the most at once (at each level of the decoder, a block that
// changes the width holds its input and its output, and the upsampler its input and its output, four times the
// pixels) and the largest single tensor.
struct Parking {
    int64_t most = 0, largest = 0;
};
Parking tiled_parking_bytes(const StableDiffusionModel& model, int width, int height, int batch, int64_t elem) {
    const std::vector<int>& ch = model.vae->config().block_out_channels;
    const int levels = int(ch.size());
    Parking p;
    int64_t prev = ch.back();
    for (int i = 0; i < levels; ++i) {
        const int64_t pixels = int64_t(batch) * width * height >> (2 * (levels - 1 - i));
        const int64_t out = ch[levels - 1 - i];
        p.most = std::max(p.most, (prev + out) * pixels * elem);
        p.largest = std::max(p.largest, std::max(prev, out) * pixels * elem);
        if (i + 1 < levels) {
            p.most = std::max(p.most, 5 * out * pixels * elem);
            p.largest = std::max(p.largest, 4 * out * pixels * elem);
        }
        prev = out;
    }
    return p;
}

}  // namespace

int64_t largest_vae_decode_tensor_bytes(const StableDiffusionModel& model, int width, int height, int batch) {
    // The whole decode holds whole what the bands park: the same largest tensor.
    return tiled_parking_bytes(model, width, height, batch, int64_t(dtype_size(model.vae->weight_dtype()))).largest;
}

bool tiled_decode_fits_device(const StableDiffusionModel& model, int width, int height, int batch) {
    if (model.device.is_cpu()) return false;
    Backend& gpu = backend_for(model.device);
    const int64_t elem = int64_t(dtype_size(model.vae->weight_dtype()));
    const Parking p = tiled_parking_bytes(model, width, height, batch, elem);
    const int64_t limit = gpu.max_allocation_bytes();
    int64_t free = gpu.memory_info().free;
    // Under a cap the driver's free memory is not what kiln may take: the cap less kiln's tensors (cached blocks
    // go back to make room) is.
    if (const int64_t cap = gpu.memory_limit(); cap > 0)
        free = std::min(free, cap - memory_stats().device(device_name(model.device)).total.current);
    return p.most <= free / 2 && (limit == 0 || p.largest <= limit);
}

namespace {

// The band size: band_bytes or the default, and on a GPU within one allocation.
int64_t band_size(const StableDiffusionModel& model, int64_t band_bytes) {
    const bool gpu = !model.device.is_cpu();
    const int64_t max_tensor = gpu ? backend_for(model.device).max_allocation_bytes() : 0;
    const int64_t wanted = band_bytes > 0 ? band_bytes : default_vae_band_bytes(gpu);
    return max_tensor > 0 ? std::min(wanted, max_tensor) : wanted;
}

// Images [first, first + count) of a batch on the host, as a batch of their own.
Tensor images_of(const Tensor& batch, int64_t first, int64_t count) {
    Shape shape = batch.shape();
    shape[0] = count;
    Tensor out(shape);
    const int64_t per = batch.numel() / batch.dim(0);
    std::memcpy(out.data(), batch.data() + first * per, size_t(count * per) * sizeof(float));
    return out;
}

// The latents' images decoded `chunk` at a time by `decode` (which returns them on the host), as one batch.
Tensor decode_in_chunks(const Tensor& latents, int64_t chunk, const std::function<Tensor(const Tensor&)>& decode) {
    const int64_t n = latents.dim(0);
    if (chunk >= n) return decode(latents);
    Tensor out;
    for (int64_t first = 0; first < n; first += chunk) {
        const int64_t count = std::min(chunk, n - first);
        const Tensor images = decode(images_of(latents, first, count));
        if (out.empty()) {
            Shape shape = images.shape();
            shape[0] = n;
            out = Tensor(shape);
        }
        const int64_t per = images.numel() / count;
        std::memcpy(out.data() + first * per, images.data(), size_t(images.numel()) * sizeof(float));
    }
    return out;
}

// The line `auto` says when it goes to bands on a GPU: the whole pass (`what`: "decode", doing it: "decoding")
// ran out of memory there, or its largest tensor is more than one allocation may be.
// `unsupported`: why the whole pass could not run at this size, where it was not memory (try_whole).
std::string bands_notice(const StableDiffusionModel& model, const char* what, const char* doing, int width, int height,
                         bool too_large, int64_t largest, int64_t max_tensor, bool park_on_device,
                         const std::string& unsupported) {
    const std::string why = too_large ? " needs a tensor of " + format_mib(largest) + ", more than one allocation may be on " +
                                            device_name(model.device) + " (" + format_mib(max_tensor) + ")"
                            : !unsupported.empty() ? " cannot run whole (" + unsupported + ")"
                                                   : " ran out of memory on " + device_name(model.device);
    return std::string("the VAE ") + what + " of " + std::to_string(width) + "x" + std::to_string(height) + why + "; " +
           doing + " in bands instead, the activations kept on the " + (park_on_device ? "GPU" : "host") +
           (too_large ? "" : " (--vae-tiling on skips the first try)");
}

}  // namespace

// Runs a whole VAE pass on a GPU; false where it ran out of memory or cannot run at this size on the backend (a
// Vulkan op past the driver's workgroup grid: more than about 2 million output pixels a convolution; `unsupported`
// then says why), so that the caller goes to bands. Other errors pass on.
template <class Result>
bool try_whole(const std::function<Result()>& pass, Result& out, std::string& unsupported) {
    try {
        out = pass();
        return true;
    } catch (const Error& e) {
        if (e.kind() != ErrorKind::OutOfMemory && e.kind() != ErrorKind::Unsupported) throw;
        if (e.kind() == ErrorKind::Unsupported) unsupported = e.what();
        return false;
    }
}

Tensor decode_latents(const StableDiffusionModel& model, const Tensor& latents, VaeTiling tiling,
                      const std::function<void(const std::string&)>& notice, int64_t band_bytes,
                      bool park_where_it_fits, bool* whole_ran_out, const std::function<std::string()>& make_room) {
    const bool gpu = !model.device.is_cpu();
    const int64_t max_tensor = gpu ? backend_for(model.device).max_allocation_bytes() : 0;
    // On a GPU a band's tensors stay within one allocation too.
    const int64_t band = band_size(model, band_bytes);
    // One image in bands, parked on the GPU where asked; where the GPU runs out all the same, parked on the host
    // (as --vae-tiling on parks), and the notice says so once.
    bool said_host = false;
    const auto tiled_one = [&](const Tensor& one, bool park_on_device) {
        if (!park_on_device) return model.vae->decode_tiled(one, band, false);
        try {
            return model.vae->decode_tiled(one, band, true);
        } catch (const Error& e) {
            if (e.kind() != ErrorKind::OutOfMemory) throw;
            if (notice && !said_host)
                notice(std::string("the VAE decode's bands ran out of memory with their activations on ") +
                       device_name(model.device) + " (" + e.what() + "); parking them on the host instead");
            said_host = true;
            return model.vae->decode_tiled(one, band, false);
        }
    };
    // In bands, a batch's images one at a time: what is parked is one image's (images are independent, and the
    // banded passes work image by image anyway).
    const auto tiled_each = [&](bool park_on_device) {
        return decode_in_chunks(latents, 1, [&](const Tensor& one) { return tiled_one(one, park_on_device); });
    };
    if (tiling == VaeTiling::On) {
        // A plan's bands park on the GPU where one image's parking fits beside the rest (a round trip through the
        // host a band costs more than the decode: docs/VULKAN.md, "The tiled decode's statistics on the device").
        const int f = model.vae->config().downsample_factor();
        return tiled_each(park_where_it_fits && gpu &&
                          tiled_decode_fits_device(model, int(latents.dim(3)) * f, int(latents.dim(2)) * f, 1));
    }
    if (tiling == VaeTiling::Off) return model.vae->decode(latents).to_host();
    const int f = model.vae->config().downsample_factor();
    const int width = int(latents.dim(3)) * f, height = int(latents.dim(2)) * f, n = int(latents.dim(0));
    if (!gpu) {
        // Whole if it fits; else as many images at a time as fit whole; else in bands.
        const int64_t free = available_host_bytes();
        for (int chunk = n; chunk >= 1; --chunk)
            if (free < 0 || estimate_vae_decode_bytes(model, width, height, chunk, false) <= free)
                return decode_in_chunks(latents, chunk, [&](const Tensor& some) { return model.vae->decode(some); });
        return tiled_each(false);
    }
    // A GPU says when it runs out: the whole decode is tried first, and what it allocated is freed as the error
    // unwinds, before the bands start. They park the activations on the GPU too where those fit in half of what
    // it has free (no transfers; the whole decode's scratch was what did not fit), else on the host.
    // Not tried where its largest tensor exceeds one allocation (a Vulkan driver's limit).
    const int64_t largest = largest_vae_decode_tensor_bytes(model, width, height, n);
    const bool too_large = max_tensor > 0 && largest > max_tensor;
    std::string unsupported;
    Tensor whole;
    const std::function<Tensor()> decode_whole = [&] { return model.vae->decode(latents).to_host(); };
    if (!too_large && try_whole(decode_whole, whole, unsupported)) return whole;
    const bool ran_out = !too_large && unsupported.empty();
    if (whole_ran_out && ran_out) *whole_ran_out = true;
    if (ran_out && make_room) {
        if (const std::string moved = make_room(); !moved.empty()) {
            if (notice)
                notice("the VAE decode of " + std::to_string(width) + "x" + std::to_string(height) +
                       " ran out of memory on " + device_name(model.device) + "; " + moved + " to make room for it");
            if (try_whole(decode_whole, whole, unsupported)) return whole;
        }
    }
    if (n > 1) {  // a batch: each image as one alone (whole where it fits, else in bands), the notices the first's
        if (notice)
            notice("the VAE decode of a batch of " + std::to_string(n) + " at " + std::to_string(width) + "x" +
                   std::to_string(height) +
                   (too_large ? " has too large a tensor" : !unsupported.empty() ? " cannot run whole" : " ran out of memory") +
                   "; decoding one image at a time");
        bool first = true;
        return decode_in_chunks(latents, 1, [&](const Tensor& one) {
            const Tensor image = decode_latents(model, one, tiling, first ? notice : nullptr, band_bytes, false,
                                                whole_ran_out);
            first = false;
            return image;
        });
    }
    const bool park_on_device = tiled_decode_fits_device(model, width, height, n);
    if (notice)
        notice(bands_notice(model, "decode", "decoding", width, height, too_large, largest, max_tensor, park_on_device,
                            unsupported));
    return tiled_one(latents, park_on_device);
}

Vae::Posterior encode_image(const StableDiffusionModel& model, const Tensor& image, VaeTiling tiling,
                            const std::function<void(const std::string&)>& notice, int64_t band_bytes) {
    const int64_t band = band_size(model, band_bytes);
    if (tiling == VaeTiling::On) return model.vae->encode_tiled(image, band);
    if (tiling == VaeTiling::Off) return model.vae->encode(image);
    const int n = int(image.dim(0)), height = int(image.dim(2)), width = int(image.dim(3));
    if (model.device.is_cpu()) {
        // The whole encode's first level holds as much as the whole decode's last: the same estimate.
        const int64_t free = available_host_bytes();
        const bool fits = free < 0 || estimate_vae_decode_bytes(model, width, height, n, false) <= free;
        return fits ? model.vae->encode(image) : model.vae->encode_tiled(image, band);
    }
    Backend& gpu = backend_for(model.device);
    const int64_t max_tensor = gpu.max_allocation_bytes();
    // The largest tensor either encode makes on the device: the first level's activation.
    const int64_t elem = int64_t(dtype_size(model.vae->weight_dtype()));
    const int64_t largest = int64_t(n) * model.vae->config().block_out_channels.at(0) * width * height * elem;
    const bool too_large = max_tensor > 0 && largest > max_tensor;
    std::string unsupported;
    Vae::Posterior whole;
    if (!too_large && try_whole<Vae::Posterior>([&] { return model.vae->encode(image); }, whole, unsupported))
        return whole;
    // The bands park the activations on the GPU where the first level's (that activation and the downsampler's
    // output, a quarter of it) fit in half of what it has free and in one allocation.
    const bool park_on_device = !too_large && largest + largest / 4 <= gpu.memory_info().free / 2;
    if (notice)
        notice(bands_notice(model, "encode", "encoding", width, height, too_large, largest, max_tensor, park_on_device,
                            unsupported));
    return model.vae->encode_tiled(image, band, park_on_device);
}

}  // namespace kiln
