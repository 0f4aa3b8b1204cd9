// Shared helpers of the sampling tests: the diffusers fixtures and a deterministic noise source.
#pragma once
#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/noise.h"
#include "core/tensor.h"
#include "sampling/scheduler_config.h"

namespace kiln::test {

inline std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open fixture " + path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Fixture JSON as Python wrote it (pipeline.json holds -Infinity).
inline nlohmann::json load_json(const std::string& relative) {
    const std::string path = std::string(KILN_TEST_DATA) + "/" + relative;
    return parse_scheduler_config_text(read_text(path), path);
}

inline const char* const kModels[] = {"sd15-mini", "sd2-mini", "sdxl-mini"};

// The scheduler config the fixtures' pipelines were built from: the model's own scheduler as the
// loaded pipeline reported it (including its "_use_default_values"), i.e. the fixture entry of the
// model's default scheduler class, which is PNDM for the SD1/SD2 minis and Euler for SDXL.
inline nlohmann::json loaded_model_scheduler_config(const std::string& model) {
    const nlohmann::json disk = load_json(model + "/diffusers/scheduler/scheduler_config.json");
    const std::string cls = disk.at("_class_name");
    const nlohmann::json pipeline = load_json(model + "/pipeline.json");
    const char* key = cls == "PNDMScheduler" ? "pndm" : "euler";
    if (pipeline.at(key).at("class") != cls) throw std::runtime_error("fixture class mismatch for " + model);
    return pipeline.at(key).at("config");
}

// Deterministic standard-normal-ish noise (Box-Muller over a 64-bit LCG); counts its draws.
class TestNoise : public NoiseGenerator {
public:
    explicit TestNoise(uint64_t seed = 1) : state_(seed) {}
    Tensor randn(const Shape& shape) override {
        ++calls;
        Tensor t(shape);
        for (int64_t i = 0; i < t.numel(); ++i) {
            const double u1 = (static_cast<double>(next() >> 11) + 1.0) / 9007199254740993.0;
            const double u2 = static_cast<double>(next() >> 11) / 9007199254740992.0;
            t[i] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
        }
        return t;
    }
    int calls = 0;

private:
    uint64_t next() {
        state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
        return state_;
    }
    uint64_t state_;
};

// A denoiser that records the timesteps the loop calls it with and returns zeros.
struct RecordingDenoiser {
    std::vector<float> seen;
    Tensor operator()(const Tensor& x, float t) {
        seen.push_back(t);
        return Tensor(x.shape());
    }
};

}  // namespace kiln::test
