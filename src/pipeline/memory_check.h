// A cheap estimate of the activation memory a generation needs, checked against what the machine
// has free before any work starts: an impossible request is an OutOfMemory error naming both
// figures, not a process killed by the kernel an hour later.
#pragma once
#include <cstdint>

#include "models/model.h"

namespace kiln {

// A UNet call's rows per image with guidance and a plain prompt (AND parts add more: unet_rows_per_image).
constexpr int kGuidedUNetRows = 2;

// Peak bytes of activations and the ops' scratch (not weights, which are already loaded) for `batch` width x
// height images sampled together (the UNet and the VAE decode take the whole batch at once), with the VAE
// decode whole or in bands (vae_tiling.h), the UNet's calls holding `unet_rows_per_image` rows per image.
int64_t estimate_activation_bytes(const StableDiffusionModel& model, int width, int height, int batch = 1,
                                  bool vae_tiled = false, int unet_rows_per_image = kGuidedUNetRows);

// The UNet's part of it: its activations for `batch` x `unet_rows_per_image` rows, and the ops' scratch.
int64_t estimate_unet_activation_bytes(const StableDiffusionModel& model, int width, int height, int batch = 1,
                                       int unet_rows_per_image = kGuidedUNetRows);

// The CPU ops' scratch beside the activations, whatever the image (see estimate_activation_bytes).
int64_t ops_scratch_bytes();

// Bytes the host can still give (MemAvailable), or -1 when unknown.
int64_t available_host_bytes();

// Throws ErrorKind::OutOfMemory when the estimate exceeds what is available.
void check_memory_for(const StableDiffusionModel& model, int width, int height, int batch = 1,
                      bool vae_tiled = false, int unet_rows_per_image = kGuidedUNetRows);

}  // namespace kiln
