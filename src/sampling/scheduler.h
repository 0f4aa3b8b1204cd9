// The scheduler interface: one implementation per diffusers scheduler class, mirroring its
// set_timesteps / scale_model_input / step / add_noise. Schedulers know nothing of models or
// backends; randomness comes only from the NoiseGenerator passed to step().
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/noise.h"
#include "core/tensor.h"
#include "sampling/scheduler_config.h"

namespace kiln {

class Scheduler {
public:
    virtual ~Scheduler() = default;

    // Prepares the schedule for `num_inference_steps` steps and resets all state (multistep history,
    // Heun's half step, the begin index). Throws kiln::Error for 0 steps or more than the model's
    // num_train_timesteps.
    virtual void set_timesteps(int num_inference_steps) = 0;

    // The timesteps the model is called with, in order. One entry per model call, so it can be
    // longer than the step count: Heun repeats every timestep but the first (two model calls per
    // step), PNDM's PLMS repeats its second timestep.
    virtual const std::vector<float>& timesteps() const = 0;

    // The float32 sigmas diffusers keeps (timesteps().size() + 1 entries, ending in the final sigma);
    // empty for schedulers that have none (DDIM, PNDM, LCM).
    virtual const std::vector<float>& sigmas() const;

    // Standard deviation of the initial noise: txt2img starts from randn * init_noise_sigma().
    virtual float init_noise_sigma() const = 0;

    // The model input for model call `step_index` (an index into timesteps()).
    virtual Tensor scale_model_input(const Tensor& sample, int step_index) = 0;

    // One update after model call `step_index`; returns the next sample. Calls must come in order
    // (from begin index to the end): multistep schedulers keep the previous model outputs. Stochastic
    // schedulers (Euler ancestral, LCM) draw noise of the sample's shape from `rng`.
    virtual Tensor step(const Tensor& model_output, int step_index, const Tensor& sample, NoiseGenerator& rng) = 0;

    // img2img: `original` noised to the level of model call `step_index`.
    virtual Tensor add_noise(const Tensor& original, const Tensor& noise, int step_index) const = 0;

    // Model calls per step (2 for Heun); img2img starts at t_start * order().
    virtual int order() const { return 1; }

    // img2img starts partway; the index of the first model call.
    virtual void set_begin_index(int begin_index) { begin_index_ = begin_index; }
    int begin_index() const { return begin_index_; }

    // The step count given to set_timesteps (0 before).
    int num_inference_steps() const { return num_inference_steps_; }

    const SchedulerConfig& config() const { return config_; }

protected:
    explicit Scheduler(SchedulerConfig config) : config_(std::move(config)) {}
    void require_step_index(int step_index, const char* what) const;

    SchedulerConfig config_;
    int num_inference_steps_ = 0;
    int begin_index_ = 0;
};

// The scheduler for a kiln sampler name (see kiln_sampler_names()); the config must have been
// resolved for the same sampler's class by scheduler_config_for. Options kiln does not implement
// (dynamic thresholding, SDE variants, flow sigmas, ...) throw kiln::Error(Unsupported) here.
std::unique_ptr<Scheduler> make_scheduler(const std::string& sampler, const SchedulerConfig& config);

}  // namespace kiln
