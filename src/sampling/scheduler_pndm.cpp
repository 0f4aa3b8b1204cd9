// PNDMScheduler (Liu et al. 2022): pseudo Runge-Kutta warm-up then linear multistep (PLMS); with
// skip_prk_steps, as Stable Diffusion configures it, PLMS from the first step.
#include <algorithm>
#include <deque>
#include <optional>

#include "sampling/noise_schedule.h"
#include "sampling/schedulers.h"
#include "sampling/float_math.h"  // last: turns off FMA contraction below

namespace kiln {
namespace {

class PndmScheduler final : public Scheduler {
public:
    explicit PndmScheduler(const SchedulerConfig& c) : Scheduler(c) {
        alphas_cumprod_ = schedule::alphas_cumprod(c);
        final_alpha_cumprod_ = c.set_alpha_to_one ? 1.0f : alphas_cumprod_[0];
    }

    void set_timesteps(int n) override {
        schedule::require_valid_steps(n, config_);
        const int64_t N = config_.num_train_timesteps;
        // Ascending schedule first, as diffusers' self._timesteps.
        std::vector<int64_t> base;
        if (config_.timestep_spacing == "linspace") {
            for (double t : schedule::np_linspace(0, static_cast<double>(N - 1), n))
                base.push_back(static_cast<int64_t>(schedule::np_round(t)));
        } else if (config_.timestep_spacing == "leading") {
            const int64_t ratio = N / n;
            for (int64_t i = 0; i < n; ++i) base.push_back(i * ratio + config_.steps_offset);
        } else {
            for (double t : schedule::np_arange(static_cast<double>(N), 0, -static_cast<double>(N) / n))
                base.push_back(static_cast<int64_t>(schedule::np_round(t)) - 1);
            std::reverse(base.begin(), base.end());
        }
        const auto size = static_cast<int64_t>(base.size());
        prk_timesteps_.clear();
        std::vector<int64_t> plms;
        if (config_.skip_prk_steps) {
            // base[:-1] + base[-2:-1] + base[-1:], reversed: the second timestep is visited twice.
            for (int64_t i = 0; i + 1 < size; ++i) plms.push_back(base[i]);
            if (size >= 2) plms.push_back(base[size - 2]);
            plms.push_back(base[size - 1]);
            std::reverse(plms.begin(), plms.end());
        } else {
            require(size >= pndm_order_, ErrorKind::InvalidArgument,
                    "PNDM without skip_prk_steps needs at least 4 steps, got " + std::to_string(n));
            const int64_t half = N / n / 2;
            std::vector<int64_t> prk;  // base[-4:].repeat(2) + tile([0, half], 4)
            for (int64_t i = size - pndm_order_; i < size; ++i) {
                prk.push_back(base[i]);
                prk.push_back(base[i] + half);
            }
            std::vector<int64_t> doubled;  // prk[:-1].repeat(2)[1:-1]
            for (size_t i = 0; i + 1 < prk.size(); ++i) {
                doubled.push_back(prk[i]);
                doubled.push_back(prk[i]);
            }
            prk_timesteps_.assign(doubled.begin() + 1, doubled.end() - 1);
            std::reverse(prk_timesteps_.begin(), prk_timesteps_.end());
            for (int64_t i = size - pndm_order_; i-- > 0;) plms.push_back(base[i]);  // base[:-3][::-1]
        }
        timesteps_.clear();
        for (int64_t t : prk_timesteps_) timesteps_.push_back(static_cast<float>(check_timestep(t)));
        for (int64_t t : plms) timesteps_.push_back(static_cast<float>(check_timestep(t)));
        num_inference_steps_ = n;
        begin_index_ = 0;
        ets_.clear();
        counter_ = 0;
        cur_model_output_.reset();
        cur_sample_.reset();
    }

    const std::vector<float>& timesteps() const override { return timesteps_; }
    float init_noise_sigma() const override { return 1.0f; }

    Tensor scale_model_input(const Tensor& sample, int step_index) override {
        require_step_index(step_index, "PNDM scale_model_input");
        return sample;
    }

    Tensor step(const Tensor& model_output, int step_index, const Tensor& sample, NoiseGenerator&) override {
        require_step_index(step_index, "PNDM step");
        const auto t = static_cast<int64_t>(timesteps_[static_cast<size_t>(step_index)]);
        if (counter_ < static_cast<int64_t>(prk_timesteps_.size()) && !config_.skip_prk_steps)
            return step_prk(model_output, t, sample);
        return step_plms(model_output, t, sample);
    }

    Tensor add_noise(const Tensor& original, const Tensor& noise, int step_index) const override {
        require_step_index(step_index, "PNDM add_noise");
        return noised_at_alpha(original, noise,
                               alphas_cumprod_[static_cast<size_t>(timesteps_[static_cast<size_t>(step_index)])]);
    }

private:
    int64_t check_timestep(int64_t t) const {
        require(t >= 0 && t < config_.num_train_timesteps, ErrorKind::InvalidArgument,
                "PNDM timestep " + std::to_string(t) + " is outside the model's training timesteps (steps_offset " +
                    std::to_string(config_.steps_offset) + ")");
        return t;
    }

    Tensor step_prk(const Tensor& model_output, int64_t t, const Tensor& sample) {
        const int64_t half = config_.num_train_timesteps / num_inference_steps_ / 2;
        const int64_t diff_to_prev = counter_ % 2 ? 0 : half;
        const int64_t prev_t = t - diff_to_prev;
        const int64_t cur_t = prk_timesteps_[static_cast<size_t>(counter_ / 4 * 4)];
        const float sixth = static_cast<float>(1.0 / 6);
        const float third = static_cast<float>(1.0 / 3);
        Tensor eps = model_output;
        auto accumulate = [&](float w) {
            const Tensor scaled = map_elements(model_output, [=](float e) { return w * e; });
            cur_model_output_ = cur_model_output_ ? map_elements(*cur_model_output_, scaled, [](float a, float b) { return a + b; })
                                                  : scaled;  // 0 + x
        };
        if (counter_ % 4 == 0) {
            accumulate(sixth);
            ets_.push_back(model_output);
            cur_sample_ = sample;
        } else if ((counter_ - 1) % 4 == 0 || (counter_ - 2) % 4 == 0) {
            accumulate(third);
        } else {
            eps = map_elements(*cur_model_output_, model_output, [=](float acc, float e) { return acc + sixth * e; });
            cur_model_output_.reset();
        }
        const Tensor& from = cur_sample_ ? *cur_sample_ : sample;
        Tensor prev = previous_sample(from, cur_t, prev_t, eps);
        ++counter_;
        return prev;
    }

    Tensor step_plms(const Tensor& model_output, int64_t t, const Tensor& sample) {
        const int64_t ratio = config_.num_train_timesteps / num_inference_steps_;
        int64_t prev_t = t - ratio;
        if (counter_ != 1) {
            while (ets_.size() > 3) ets_.pop_front();
            ets_.push_back(model_output);
        } else {
            // The repeated timestep: redo the first step with the averaged noise estimate.
            prev_t = t;
            t = t + ratio;
        }
        Tensor eps;
        const Tensor* from = &sample;
        Tensor saved;
        const size_t n = ets_.size();
        if (n == 1 && counter_ == 0) {
            eps = model_output;
            cur_sample_ = sample;
        } else if (n == 1 && counter_ == 1) {
            eps = map_elements(model_output, ets_.back(), [](float a, float b) { return (a + b) / 2.0f; });
            saved = *cur_sample_;
            from = &saved;
            cur_sample_.reset();
        } else if (n == 2) {
            eps = map_elements(ets_[1], ets_[0], [](float e1, float e2) { return (3.0f * e1 - e2) / 2.0f; });
        } else if (n == 3) {
            eps = map_elements(ets_[2], ets_[1], ets_[0], [](float e1, float e2, float e3) {
                return (23.0f * e1 - 16.0f * e2 + 5.0f * e3) / 12.0f;
            });
        } else {
            const float w = static_cast<float>(1.0 / 24);
            const Tensor partial = map_elements(ets_[3], ets_[2], ets_[1], [](float e1, float e2, float e3) {
                return 55.0f * e1 - 59.0f * e2 + 37.0f * e3;
            });
            eps = map_elements(partial, ets_[0], [=](float p, float e4) { return w * (p - 9.0f * e4); });
        }
        Tensor prev = previous_sample(*from, t, prev_t, eps);
        ++counter_;
        return prev;
    }

    // Formula (9) of the PNDM paper, as diffusers' _get_prev_sample.
    Tensor previous_sample(const Tensor& sample, int64_t t, int64_t prev_t, const Tensor& model_output) const {
        require(t >= 0 && t < config_.num_train_timesteps, ErrorKind::InvalidArgument,
                "PNDM step reached timestep " + std::to_string(t) + " outside the training schedule");
        const float a_t = alphas_cumprod_[static_cast<size_t>(t)];
        const float a_prev = prev_t >= 0 ? alphas_cumprod_[static_cast<size_t>(prev_t)] : final_alpha_cumprod_;
        const float b_t = 1.0f - a_t;
        const float b_prev = 1.0f - a_prev;
        Tensor eps = model_output;
        if (config_.prediction_type == "v_prediction") {
            const float sa = sqrt_f32(a_t);
            const float sb = sqrt_f32(b_t);
            eps = map_elements(model_output, sample, [=](float v, float x) { return sa * v + sb * x; });
        } else {
            require(config_.prediction_type == "epsilon", ErrorKind::Unsupported,
                    "PNDMScheduler supports prediction_type epsilon or v_prediction, not " + config_.prediction_type);
        }
        const float sample_coeff = sqrt_f32(a_prev / a_t);
        const float denom = a_t * sqrt_f32(b_prev) + sqrt_f32(a_t * b_t * a_prev);
        const float diff = a_prev - a_t;
        return map_elements(sample, eps, [=](float x, float e) { return sample_coeff * x - diff * e / denom; });
    }

    static constexpr int64_t pndm_order_ = 4;
    std::vector<float> alphas_cumprod_;
    float final_alpha_cumprod_ = 1.0f;
    std::vector<float> timesteps_;
    std::vector<int64_t> prk_timesteps_;
    std::deque<Tensor> ets_;
    int64_t counter_ = 0;
    std::optional<Tensor> cur_model_output_;
    std::optional<Tensor> cur_sample_;
};

}  // namespace

std::unique_ptr<Scheduler> make_pndm_scheduler(const SchedulerConfig& config) {
    reject_option(config.prediction_type == "sample", config, "prediction_type \"sample\"");
    return std::make_unique<PndmScheduler>(config);
}

}  // namespace kiln
