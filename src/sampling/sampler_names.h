// Sampler names users know: kiln's own names and AUTOMATIC1111's labels, both ways.
#pragma once
#include <string>

namespace kiln {

// Parses a sampler name, case-insensitively and with spaces, '_' and '-' interchangeable: kiln names
// ("euler_a", "dpmpp_2m_karras", ...), AUTOMATIC1111 labels ("Euler a", "Euler", "Heun", "LMS", "DDIM",
// "PLMS", "DPM++ 2M", "UniPC", "LCM", and the older combined "DPM++ 2M Karras", "LMS Karras"), plus an
// optional AUTOMATIC1111 schedule type ("" / "Automatic" keep the sampler's own schedule, "Karras"
// selects Karras sigmas). Returns a kiln sampler name (see kiln_sampler_names()). Throws kiln::Error
// listing the valid names for an unknown name or schedule type, or a sampler without a Karras variant.
std::string parse_sampler(const std::string& name, const std::string& schedule_type = "");

struct A1111SamplerLabel {
    std::string sampler;        // e.g. "DPM++ 2M"
    std::string schedule_type;  // "Karras" or "Automatic"
};

// The AUTOMATIC1111 "Sampler" and "Schedule type" values for PNG metadata, e.g. dpmpp_2m_karras ->
// {"DPM++ 2M", "Karras"}. Throws kiln::Error for a name that is not a kiln sampler name.
A1111SamplerLabel a1111_sampler_label(const std::string& kiln_sampler);

// The step count AUTOMATIC1111 builds a prompt-editing schedule over for `steps` steps of this sampler: its
// sampler table's "total_steps", twice the steps for the samplers it marks "second_order" (of kiln's, Heun
// in every schedule), the steps otherwise. Its denoiser then counts model calls, not steps, against that
// schedule (modules/sd_samplers_common.py SamplerData.total_steps, modules/processing.py setup_conds).
int a1111_schedule_steps(const std::string& kiln_sampler, int steps);

}  // namespace kiln
