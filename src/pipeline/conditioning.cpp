#include "pipeline/conditioning.h"

#include <algorithm>
#include <cmath>

#include "kiln/error.h"
#include "text/composable_prompt.h"
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

// The webui's stack_conds: contexts shorter than the longest get copies of their last row (token) appended.
void pad_to_longest(std::vector<Conditioning>& parts) {
    int64_t tokens = 0;
    for (const Conditioning& c : parts) tokens = std::max(tokens, c.context.dim(1));
    for (Conditioning& c : parts) {
        const int64_t have = c.context.dim(1), width = c.context.dim(2);
        if (have == tokens) continue;
        const float* last = c.context.data() + (have - 1) * width;
        std::vector<float> v(c.context.data(), c.context.data() + c.context.numel());
        for (int64_t t = have; t < tokens; ++t) v.insert(v.end(), last, last + width);
        c.context = Tensor(Shape{1, tokens, width}, std::move(v));
    }
}

}  // namespace

std::vector<size_t> ConditioningSchedule::entries_for(int call) const {
    std::vector<size_t> entries{negative_ends.empty() ? 0 : entry_for(negative_ends, call)};
    for (const std::vector<int>& ends : positive_ends) entries.push_back(entry_for(ends, call));
    return entries;
}

size_t ConditioningSchedule::part_for_call(int call) const { return part_of.at(entries_for(call)); }

int unet_rows_per_image(const std::string& prompt, PromptSyntax syntax, bool with_negative) {
    if (syntax != PromptSyntax::A1111) return with_negative ? 2 : 1;
    const std::vector<ComposablePart> parts = split_composable_prompt(remove_extra_network_tags(prompt).prompt);
    return static_cast<int>(parts.size()) + (with_negative || is_composed(parts) ? 1 : 0);  // s.guided below
}

ConditioningSchedule encode_conditioning_schedule(const StableDiffusionModel& model, const std::string& prompt,
                                                  const std::optional<std::string>& negative, bool with_negative,
                                                  const PromptEncodingOptions& options, int width, int height,
                                                  const std::function<void(const std::string&)>& notice) {
    const bool sdxl = model.arch == Architecture::SDXL;
    // The webui takes the tags out first, then splits at AND (extra networks are parsed before the conditioning).
    std::vector<ComposablePart> and_parts{{prompt, 1.0}};
    if (options.syntax == PromptSyntax::A1111) {
        and_parts = split_composable_prompt(without_network_tags(model, prompt, negative, notice));
        for (const ComposablePart& part : and_parts)
            if (!std::isfinite(part.weight))
                fail(ErrorKind::InvalidArgument, "the AND weight of \"" + part.text + "\" in the prompt is not a finite number");
    }
    ConditioningSchedule s;
    s.guided = with_negative || is_composed(and_parts);
    for (const ComposablePart& part : and_parts) s.and_weights.push_back(part.weight);
    const bool zero_negative = s.guided && model.force_zeros_for_empty_prompt && !negative;
    const bool encode_negative = s.guided && !zero_negative;
    // One call for all prompts, [negative, parts...]: their chunks go through the encoders in shared batches.
    std::vector<std::string> prompts;
    if (encode_negative) prompts.push_back(negative.value_or(""));
    for (const ComposablePart& part : and_parts) prompts.push_back(part.text);
    const std::vector<std::vector<ScheduledEncoding>> enc = encode_prompt_schedules(model, prompts, options);
    const size_t first_part = encode_negative ? 1 : 0;

    if (encode_negative)
        for (const ScheduledEncoding& e : enc.front()) s.negative_ends.push_back(e.end_step);
    s.positive_ends.resize(and_parts.size());
    for (size_t k = 0; k < and_parts.size(); ++k)
        for (const ScheduledEncoding& e : enc[first_part + k]) s.positive_ends[k].push_back(e.end_step);
    // Only the combinations some call meets.
    int last_end = 0;
    for (int e : s.negative_ends) last_end = std::max(last_end, e);
    for (const std::vector<int>& ends : s.positive_ends)
        for (int e : ends) last_end = std::max(last_end, e);
    for (int call = 0; call <= last_end + 1; ++call) {
        const std::vector<size_t> entries = s.entries_for(call);
        if (s.part_of.count(entries)) continue;
        s.part_of[entries] = s.parts.size();
        std::vector<Conditioning> positives;
        for (size_t k = 0; k < and_parts.size(); ++k)
            positives.push_back(single(enc[first_part + k][entries[k + 1]], sdxl, width, height));
        pad_to_longest(positives);
        Conditioning positive = positives.front();
        for (size_t k = 1; k < positives.size(); ++k) positive = joined(positive, positives[k]);
        CallConditioning part;
        if (!s.guided) {
            part.joint = positive;
        } else {
            const Conditioning neg =
                encode_negative ? single(enc.front()[entries[0]], sdxl, width, height) : zeros_like(positives.front());
            if (neg.context.dim(1) == positive.context.dim(1)) {
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
