// Noise generators by name, for command lines and pipeline options.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "core/noise.h"

namespace kiln {

// "cpu": torch's CPU generator (diffusers on CPU, ComfyUI); "cuda": torch's CUDA generator on an
// H200-class GPU (AUTOMATIC1111's default GPU seeds). Any other kind: kiln::Error InvalidArgument.
std::unique_ptr<NoiseGenerator> make_noise_generator(const std::string& kind, uint64_t seed);

}  // namespace kiln
