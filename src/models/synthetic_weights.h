// Full-size SD 1.5, SD 2.1 and SDXL models with deterministic pseudo-random weights, made in memory:
// no download, no file. For benchmarks and profiles, whose cost depends on the architecture only.
// The configurations are those of the released checkpoints (runwayml SD 1.5, stabilityai SD 2.1,
// SDXL base 1.0); "tiny" is the fixtures' sd15-mini (tests/data) for quick runs of the machinery.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model.h"

namespace kiln {

enum class SyntheticArch { SD15, SD21, SDXL, Tiny };
// "sd15", "sd21", "sdxl", "tiny"; anything else is InvalidArgument naming the choices.
SyntheticArch parse_synthetic_arch(const std::string& name);
const char* synthetic_arch_name(SyntheticArch arch);

struct ArchitectureConfigs {
    Architecture arch = Architecture::SD1;
    std::vector<ClipTextConfig> text_encoders;  // one, or two for SDXL
    std::vector<std::string> pad_tokens;        // per text encoder
    UNetConfig unet;
    bool unet_conv_projections = true;          // SD 1.x stores proj_in/out as 1x1 convs
    VaeConfig vae;
    nlohmann::json scheduler_config;
    bool force_zeros_for_empty_prompt = false;
};
ArchitectureConfigs architecture_configs(SyntheticArch arch);

struct SyntheticParts {
    bool text = true, unet = true, vae = true;
    std::optional<DType> weights;  // precision of the linear/conv weights (default float32)
    Device device;                 // where the model runs (LoadOptions::device)
    DType precision = DType::F16;  // activations and weights there (LoadOptions::precision)
    bool vae_encoder = true;       // with the VAE: its encoder too (Vae::load's with_encoder)
    bool offload_weights = false;  // LoadOptions::offload_weights
};

// A model of `arch` whose weights are made from `seed` (the same seed gives the same bits). Parts left
// out are empty (no text encoders, null unet or vae). Weights are counted as MemoryCategory::Weights.
StableDiffusionModel make_synthetic_model(SyntheticArch arch, const SyntheticParts& parts = {}, uint64_t seed = 0);

// Makes whatever tensor a loader asks for, with the shape it expects (WeightSource::load_expecting):
// weights ~ uniform with standard deviation 0.5/sqrt(fan_in), biases ~ 0.01, norm scales ~ 1 +- 0.1,
// so activations keep their scale through a deep network. Values depend only on seed and name.
class SyntheticSource : public WeightSource {
public:
    SyntheticSource(std::string component, uint64_t seed, bool conv_projections);
    bool has(const std::string&) const override { return true; }
    // Without a shape it can make only the UNet's proj_in/proj_out (square, the width of the block's
    // norm, asked for before them); anything else is InvalidModel.
    Tensor load(const std::string& name) const override;
    Tensor load_expecting(const std::string& name, const Shape& expected) const override;
    std::vector<std::string> names() const override;  // those made so far
    std::string describe() const override { return "synthetic " + component_ + " weights"; }

private:
    std::string component_;
    uint64_t seed_;
    bool conv_projections_;
    mutable std::map<std::string, Shape> made_;
};

}  // namespace kiln
