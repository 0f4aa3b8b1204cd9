#include "pipeline/conditioning.h"

#include <algorithm>

#include "kiln/error.h"
#include "text/extra_networks.h"

namespace kiln {

Tensor concat_batch(const Tensor& a, const Tensor& b) {
    Shape s = a.shape();
    s[0] += b.dim(0);
    std::vector<float> v(a.data(), a.data() + a.numel());
    v.insert(v.end(), b.data(), b.data() + b.numel());
    return Tensor(s, std::move(v));
}

namespace {

// The webui's reconstruct_cond_batch: the first entry still running at `step`, else the first entry.
size_t entry_for(const std::vector<int>& ends, int step) {
    for (size_t i = 0; i < ends.size(); ++i)
        if (step <= ends[i]) return i;
    return 0;
}

// SDXL's size conditioning: original size, crop top-left, target size, as (height, width) pairs.
Tensor time_ids_for(int64_t batch, int width, int height) {
    const float h = static_cast<float>(height), w = static_cast<float>(width);
    std::vector<float> ids;
    for (int64_t b = 0; b < batch; ++b) ids.insert(ids.end(), {h, w, 0.0f, 0.0f, h, w});
    return Tensor({batch, 6}, std::move(ids));
}

Conditioning single(const ScheduledEncoding& e, bool sdxl, int width, int height) {
    Conditioning c;
    c.context = e.context;
    if (sdxl) {
        c.text_embeds = e.pooled;
        c.time_ids = time_ids_for(1, width, height);
    }
    return c;
}

Conditioning joined(const Conditioning& negative, const Conditioning& positive) {
    Conditioning c;
    c.context = concat_batch(negative.context, positive.context);
    if (!positive.text_embeds.empty()) {
        c.text_embeds = concat_batch(negative.text_embeds, positive.text_embeds);
        c.time_ids = concat_batch(negative.time_ids, positive.time_ids);
    }
    return c;
}

Conditioning zeros_like(const Conditioning& c) {
    Conditioning z = c;
    z.context = Tensor(c.context.shape());
    if (!c.text_embeds.empty()) z.text_embeds = Tensor(c.text_embeds.shape());
    return z;
}

// The positive prompt without its extra-network tags. A LoRA tag names a LoRA the model was loaded with
// (LoadOptions::loras: merged into its weights); the others are reported, and the negative's too.
std::string without_network_tags(const StableDiffusionModel& model, const std::string& prompt,
                                 const std::optional<std::string>& negative,
                                 const std::function<void(const std::string&)>& notice) {
    PromptWithoutTags p = remove_extra_network_tags(prompt);
    for (const ExtraNetworkTag& tag : p.tags) {
        if (is_lora_tag(tag)) {
            const std::string name = parse_lora_tag(tag).name;
            bool loaded = false;
            for (const LoraApplication& l : model.loras) loaded = loaded || l.name == name;
            require(loaded, ErrorKind::InvalidArgument,
                    tag.text + ": the model was loaded without LoRA '" + name +
                        "' (kiln merges LoRA into the weights at load: LoadOptions::loras, --lora-dir)");
        } else if (notice) {
            notice(tag.text + " is not applied: kiln has no " + tag.kind +
                   " support yet; the tag is taken out of the prompt, as AUTOMATIC1111 does");
        }
    }
    if (negative && notice)
        for (const ExtraNetworkTag& tag : remove_extra_network_tags(*negative).tags)
            notice(tag.text + " in the negative prompt is read as words, as AUTOMATIC1111 reads it (it applies "
                              "extra networks from the prompt only)");
    return p.prompt;
}

}  // namespace

size_t ConditioningSchedule::part_for_call(int call) const {
    const size_t pos = entry_for(positive_ends, call);
    const size_t neg = negative_ends.empty() ? 0 : entry_for(negative_ends, call);
    return part_of_pair.at(neg * positive_ends.size() + pos);
}

ConditioningSchedule encode_conditioning_schedule(const StableDiffusionModel& model, const std::string& prompt,
                                                  const std::optional<std::string>& negative, bool with_negative,
                                                  const PromptEncodingOptions& options, int width, int height,
                                                  const std::function<void(const std::string&)>& notice) {
    const bool sdxl = model.arch == Architecture::SDXL;
    const bool zero_negative = with_negative && model.force_zeros_for_empty_prompt && !negative;
    const bool encode_negative = with_negative && !zero_negative;
    // One call for both prompts, [negative, positive]: their first chunks go through the encoders as one batch.
    std::vector<std::string> prompts;
    if (encode_negative) prompts.push_back(negative.value_or(""));
    prompts.push_back(options.syntax == PromptSyntax::A1111 ? without_network_tags(model, prompt, negative, notice) : prompt);
    const std::vector<std::vector<ScheduledEncoding>> enc = encode_prompt_schedules(model, prompts, options);
    const std::vector<ScheduledEncoding>& pos = enc.back();

    ConditioningSchedule s;
    for (const ScheduledEncoding& e : pos) s.positive_ends.push_back(e.end_step);
    if (encode_negative)
        for (const ScheduledEncoding& e : enc.front()) s.negative_ends.push_back(e.end_step);
    const size_t negatives = encode_negative ? enc.front().size() : 1;
    // Only the pairs some call meets.
    s.part_of_pair.assign(negatives * pos.size(), SIZE_MAX);
    int last_end = 0;
    for (int e : s.positive_ends) last_end = std::max(last_end, e);
    for (int e : s.negative_ends) last_end = std::max(last_end, e);
    for (int call = 0; call <= last_end + 1; ++call) {
        const size_t p = entry_for(s.positive_ends, call);
        const size_t n = encode_negative ? entry_for(s.negative_ends, call) : 0;
        size_t& slot = s.part_of_pair[n * pos.size() + p];
        if (slot != SIZE_MAX) continue;
        slot = s.parts.size();
        CallConditioning part;
        const Conditioning positive = single(pos[p], sdxl, width, height);
        if (!with_negative) {
            part.joint = positive;
        } else {
            const Conditioning neg =
                encode_negative ? single(enc.front()[n], sdxl, width, height) : zeros_like(positive);
            if (neg.context.shape() == positive.context.shape()) {
                part.joint = joined(neg, positive);
            } else {
                part.joint = positive;
                part.negative = neg;
            }
        }
        s.parts.push_back(std::move(part));
    }
    return s;
}

Conditioning encode_conditioning(const StableDiffusionModel& model, const std::string& prompt,
                                 const std::optional<std::string>& negative, bool with_negative, int clip_skip,
                                 int width, int height) {
    PromptEncodingOptions options;
    options.syntax = PromptSyntax::Plain;
    options.clip_skip = clip_skip;
    options.schedule_steps = 1;
    ConditioningSchedule s = encode_conditioning_schedule(model, prompt, negative, with_negative, options, width, height);
    return std::move(s.parts.at(0).joint);
}

}  // namespace kiln
