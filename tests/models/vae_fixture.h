// The fixture VAEs (tests/data/<model>/diffusers/vae) and the bound kiln's decode is held to against diffusers'
// float32 reference, shared by the VAE tests.
#pragma once
#include <memory>
#include <string>

#include "common/fixtures.h"
#include "io/safetensors.h"
#include "models/vae/vae.h"

namespace kiln::test {

// The references are float32 CPU evaluations of the same fp16 weights, so only the order of float32
// sums differs: unit roundoff 6e-8, growing with the sqrt of each conv's 9*C-term dot products and
// through ~30 convs and group norms. The observed error is at most 5e-6 of the tensor's largest
// magnitude; 2e-5 leaves 4x for other BLAS kernels and CPUs. It has to be that tight: the subtlest
// mistake, a GroupNorm eps of 1e-5 instead of diffusers' 1e-6, measured 7e-5 to 1.5e-4 on decoded
// and enc_mean; grosser ones (a wrong tensor, padding, group count or level order) show far larger.
constexpr double kVaeTolerance = 2e-5;

// The fixture models whose VAEs the VAE tests check.
inline const char* const kVaeModels[] = {"sd15-mini", "sd2-mini", "sdxl-mini"};

inline Vae load_diffusers_vae(const std::string& model, bool with_encoder = true) {
    const std::string dir = data_path(model + "/diffusers/vae/");
    FileSource source(
        std::make_shared<const SafetensorsFile>(SafetensorsFile::open(dir + "diffusion_pytorch_model.safetensors")));
    return Vae::load(source, load_vae_config(dir + "config.json"), with_encoder);
}

}  // namespace kiln::test
