#include "pipeline/memory_check.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "kiln/error.h"
#include "ops/tuning.h"
#include "pipeline/vae_tiling.h"

namespace kiln {

namespace {

std::string gib(int64_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / 1073741824.0);
    return buf;
}

}  // namespace

int64_t estimate_unet_activation_bytes(const StableDiffusionModel& model, int width, int height, int batch,
                                       int unet_rows_per_image) {
    const int64_t pixels = static_cast<int64_t>(width) * height;
    // Per row of the call (float32): every level's skips, ten widths of the first level (a feed-forward holds its
    // input, GEGLU's 8 and the gated 4; about 9 measured: memory_check_test), and per call one 77-token context
    // with every cross-attention's keys and values, the embeddings and the stacked time projections.
    int64_t unet = 0;
    if (model.unet) {
        const UNetConfig& c = model.unet->config();
        int64_t tokens = pixels / 64, skips = 0, kv_widths = 0, time_widths = 0;
        for (int level = 0; level < c.levels(); ++level) {
            const int64_t width = c.block_out_channels[level], blocks = 2 * c.layers_per_block + 1;  // down, up
            skips += (c.layers_per_block + 1) * width * tokens;
            tokens = std::max<int64_t>(1, tokens / 4);
            time_widths += blocks * width;
            if (c.level_has_attention[level]) kv_widths += blocks * c.transformer_depth[level] * 2 * width;
        }
        kv_widths += c.mid_transformer_depth * 2 * c.block_out_channels.back();
        time_widths += 2 * c.block_out_channels.back();
        const int64_t per_call = 77 * (kv_widths + c.cross_attention_dim) + time_widths +
                                 c.projection_class_embeddings_input_dim + 4 * c.time_embed_dim();
        unet = int64_t(unet_rows_per_image) * 4 * (skips + 10 * c.block_out_channels[0] * (pixels / 64) + per_call);
    }
    // Beside them, the ops' scratch (ops/tuning.h), whatever the image: a convolution's im2col columns, the
    // output tiles it holds (a few, each a ninth of the columns for a 3x3 kernel) and the float32 rows of a
    // 16-bit weight. Attention's score blocks (about 1 MiB a thread) come at other times, and are smaller
    // than that up to 64 threads.
    return batch * unet + ops_scratch_bytes();
}

int64_t estimate_activation_bytes(const StableDiffusionModel& model, int width, int height, int batch,
                                  bool vae_tiled, int unet_rows_per_image) {
    // The VAE decode's own figure (vae_tiling.cpp) includes the ops' scratch too.
    return std::max(estimate_unet_activation_bytes(model, width, height, batch, unet_rows_per_image),
                    estimate_vae_decode_bytes(model, width, height, batch, vae_tiled));
}

int64_t ops_scratch_bytes() { return 2 * ops::detail::kIm2colBudgetBytes + ops::detail::kWeightTileBudgetBytes; }

int64_t available_host_bytes() {
    std::ifstream f("/proc/meminfo");
    std::string key;
    int64_t kib = 0;
    std::string unit;
    while (f >> key >> kib >> unit)
        if (key == "MemAvailable:") return kib * 1024;
    return -1;
}

void check_memory_for(const StableDiffusionModel& model, int width, int height, int batch, bool vae_tiled,
                      int unet_rows_per_image) {
    const int64_t need = estimate_activation_bytes(model, width, height, batch, vae_tiled, unet_rows_per_image),
                  free = available_host_bytes();
    if (free < 0) return;
    const std::string size = std::to_string(width) + "x" + std::to_string(height);
    require(need <= free, ErrorKind::OutOfMemory,
            (batch == 1 ? "a " + size + " image needs" : "a batch of " + std::to_string(batch) + " " + size +
                                                             " images needs") +
                " about " + gib(need) + " of memory for activations, and " + gib(free) + " is available" +
                (unet_rows_per_image > kGuidedUNetRows ? " (" + std::to_string(unet_rows_per_image) + " UNet rows an image)" : "") +
                (batch == 1 ? "" : " (a smaller --batch-size, with --batch-count for the rest, needs less)"));
}

}  // namespace kiln
