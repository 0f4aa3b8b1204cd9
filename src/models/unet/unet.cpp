#include "models/unet/unet.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "kiln/error.h"
#include "ops/ops.h"

namespace kiln {

namespace {

// torch's "nearest" interpolation to an explicit size (the UNet's up path follows the skip
// connections' sizes, which are not always twice the input when latents are not multiples of 8).
// Exactly twice the size goes through ops::conv2d_upsample2x instead (upsample_then_conv).
Tensor upsample_nearest_to(const Tensor& x, int64_t out_h, int64_t out_w) {
    const int64_t n = x.dim(0), c = x.dim(1), in_h = x.dim(2), in_w = x.dim(3);
    // Latent sizes that are not multiples of 8: rare, so on a device the values take a trip to the host.
    if (x.on_device()) return ops::on_device_of(upsample_nearest_to(x.to_host(), out_h, out_w), x);
    // torch computes the scale in float and floors index * scale.
    const float sh = static_cast<float>(in_h) / out_h, sw = static_cast<float>(in_w) / out_w;
    std::vector<int64_t> src_x(out_w);
    for (int64_t j = 0; j < out_w; ++j) src_x[j] = std::min<int64_t>(static_cast<int64_t>(std::floor(j * sw)), in_w - 1);
    Tensor out({n, c, out_h, out_w});
    for (int64_t p = 0; p < n * c; ++p) {
        const float* src = x.data() + p * in_h * in_w;
        float* dst = out.data() + p * out_h * out_w;
        for (int64_t i = 0; i < out_h; ++i) {
            const int64_t si = std::min<int64_t>(static_cast<int64_t>(std::floor(i * sh)), in_h - 1);
            for (int64_t j = 0; j < out_w; ++j) dst[i * out_w + j] = src[si * in_w + src_x[j]];
        }
    }
    return out;
}

// Upsample2D: nearest interpolation to the skip connection's size, then the conv. At exactly twice
// the size the conv reads x through im2col, without the upsampled copy (the same values, fewer bytes).
Tensor upsample_then_conv(const Tensor& x, int64_t out_h, int64_t out_w, const Conv2d& conv) {
    if (out_h == 2 * x.dim(2) && out_w == 2 * x.dim(3))
        return ops::conv2d_upsample2x(x, conv.weight, &conv.bias, conv.stride, conv.padding);
    return conv(upsample_nearest_to(x, out_h, out_w));
}

}  // namespace

std::vector<const Tensor*> UNetInputs::list() const {
    std::vector<const Tensor*> t{sample, timesteps, context};
    if (text_embeds) t.insert(t.end(), {text_embeds, time_ids});
    return t;
}

UNetInputs UNetInputs::from_list(const std::vector<const Tensor*>& t) {
    require(t.size() == 3 || t.size() == 5, ErrorKind::InvalidArgument, "UNet: 3 or 5 inputs expected");
    UNetInputs in;
    in.sample = t[0];
    in.timesteps = t[1];
    in.context = t[2];
    if (t.size() == 5) {
        in.text_embeds = t[3];
        in.time_ids = t[4];
    }
    return in;
}

namespace {

// Stacked projections (the time projections, the cross-attentions' k | v) hold at most this many blocks' each:
// SDXL's 60 cross-attentions of width 1280 would otherwise be one 629 MB matrix, built twice over on the
// host while loading.
constexpr size_t kMaxStacked = 8;

// The group of width `width` with room for one more block (of `names_per_block` names), made if there is none.
int stack_group(std::vector<int64_t>& widths, std::vector<std::vector<std::string>>& names, int64_t width,
                size_t names_per_block) {
    for (size_t g = widths.size(); g-- > 0;)
        if (widths[g] == width) {
            if (names[g].size() < kMaxStacked * names_per_block) return static_cast<int>(g);
            break;
        }
    widths.push_back(width);
    names.emplace_back();
    return static_cast<int>(widths.size() - 1);
}

}  // namespace

UNet UNet::load(const WeightSource& source, const UNetConfig& c) {
    UNet u;
    u.config_ = c;
    WeightReader r(source);
    const int n = c.levels();
    const int64_t ch0 = c.block_out_channels[0], temb = c.time_embed_dim();
    require(c.heads.size() == static_cast<size_t>(n) && c.transformer_depth.size() == static_cast<size_t>(n) &&
                c.level_has_attention.size() == static_cast<size_t>(n),
            ErrorKind::InvalidModel, "UNet config: per-level lists differ in length");

    u.time_linear_1_.load(r, "time_embedding.linear_1", ch0, temb);
    u.time_linear_2_.load(r, "time_embedding.linear_2", temb, temb);
    if (c.addition_time_embed_dim > 0) {
        u.add_linear_1_.load(r, "add_embedding.linear_1", c.projection_class_embeddings_input_dim, temb);
        u.add_linear_2_.load(r, "add_embedding.linear_2", temb, temb);
    }
    u.conv_in_.load(r, "conv_in", c.in_channels, ch0, 3);

    int64_t out_ch = ch0;
    for (int i = 0; i < n; ++i) {
        DownLevel level;
        const std::string name = "down_blocks." + std::to_string(i);
        const int64_t in_ch = out_ch;
        out_ch = c.block_out_channels[i];
        for (int j = 0; j < c.layers_per_block; ++j) {
            level.resnets.emplace_back();
            level.resnets.back().load(r, name + ".resnets." + std::to_string(j), j == 0 ? in_ch : out_ch, out_ch,
                                      c.norm_groups, c.norm_eps);
            if (c.level_has_attention[i]) {
                level.attentions.emplace_back();
                level.attentions.back().load(r, name + ".attentions." + std::to_string(j), out_ch, c.heads[i],
                                             c.transformer_depth[i], c.norm_groups);
            }
        }
        level.has_downsampler = i != n - 1;
        if (level.has_downsampler) level.downsampler.load(r, name + ".downsamplers.0.conv", out_ch, out_ch, 3, 2);
        u.down_.push_back(std::move(level));
    }

    const int64_t top = c.block_out_channels.back();
    u.mid_resnet_0_.load(r, "mid_block.resnets.0", top, top, c.norm_groups, c.norm_eps);
    u.mid_attention_.load(r, "mid_block.attentions.0", top, c.heads.back(), c.mid_transformer_depth, c.norm_groups);
    u.mid_resnet_1_.load(r, "mid_block.resnets.1", top, top, c.norm_groups, c.norm_eps);

    int64_t prev_out = top;
    for (int i = 0; i < n; ++i) {
        const int level_down = n - 1 - i;  // the down level this up level mirrors
        UpLevel level;
        const std::string name = "up_blocks." + std::to_string(i);
        const int64_t up_out = c.block_out_channels[level_down];
        const int64_t skip_in = c.block_out_channels[std::max(level_down - 1, 0)];
        for (int j = 0; j <= c.layers_per_block; ++j) {
            const int64_t skip = j == c.layers_per_block ? skip_in : up_out;
            const int64_t res_in = j == 0 ? prev_out : up_out;
            level.resnets.emplace_back();
            level.resnets.back().load(r, name + ".resnets." + std::to_string(j), res_in + skip, up_out,
                                      c.norm_groups, c.norm_eps);
            if (c.level_has_attention[level_down]) {
                level.attentions.emplace_back();
                level.attentions.back().load(r, name + ".attentions." + std::to_string(j), up_out, c.heads[level_down],
                                             c.transformer_depth[level_down], c.norm_groups);
            }
        }
        level.has_upsampler = i != n - 1;
        if (level.has_upsampler) level.upsampler.load(r, name + ".upsamplers.0.conv", up_out, up_out, 3);
        prev_out = up_out;
        u.up_.push_back(std::move(level));
    }

    // The time projections, stacked by width, each block's rows in the order the blocks run.
    std::vector<int64_t> widths;
    std::vector<std::vector<std::string>> names;
    u.for_each_resnet([&](ResnetBlock& b, const std::string& name) {
        b.time_group = stack_group(widths, names, b.out_channels, 1);
        b.time_offset = int64_t(names[size_t(b.time_group)].size()) * b.out_channels;
        names[size_t(b.time_group)].push_back(name + ".time_emb_proj");
    });
    for (size_t g = 0; g < widths.size(); ++g) {
        std::vector<std::string> weights, biases;
        for (const std::string& n : names[g]) {
            weights.push_back(n + ".weight");
            biases.push_back(n + ".bias");
        }
        Linear stacked;
        stacked.weight = r.get_matrix_stack(weights, {widths[g], temb});
        stacked.bias = r.get_vector_stack(biases, widths[g]);
        u.time_projections_.push_back(std::move(stacked));
    }

    // The cross-attentions' k | v projections of the context, one stack per width: [k_1; v_1; k_2; v_2; ...].
    std::vector<int64_t> dims;
    std::vector<std::vector<std::string>> kv_names;
    u.for_each_cross_attention([&](Attention& a, const std::string& name) {
        a.kv_group = stack_group(dims, kv_names, a.dim, 2);
        std::vector<std::string>& group = kv_names[size_t(a.kv_group)];
        a.kv_column = int64_t(group.size()) * a.dim;  // two names a block: 2 dim columns
        group.push_back(name + ".to_k.weight");
        group.push_back(name + ".to_v.weight");
    });
    for (size_t g = 0; g < dims.size(); ++g)
        u.kv_projections_.push_back(r.get_matrix_stack(kv_names[g], {dims[g], c.cross_attention_dim}));

    u.norm_out_.load(r, "conv_norm_out", ch0, c.norm_groups, c.norm_eps);
    u.conv_out_.load(r, "conv_out", ch0, c.out_channels, 3);
    r.check_all_used();
    u.parameters_ = r.parameters_read();
    u.pages_ = r.take_pages();
    u.device_weights_ = r.take_device_weights();
    return u;
}

template <class Fn>
void UNet::for_each_resnet(Fn fn) {
    for (size_t i = 0; i < down_.size(); ++i)
        for (size_t j = 0; j < down_[i].resnets.size(); ++j)
            fn(down_[i].resnets[j], "down_blocks." + std::to_string(i) + ".resnets." + std::to_string(j));
    fn(mid_resnet_0_, "mid_block.resnets.0");
    fn(mid_resnet_1_, "mid_block.resnets.1");
    for (size_t i = 0; i < up_.size(); ++i)
        for (size_t j = 0; j < up_[i].resnets.size(); ++j)
            fn(up_[i].resnets[j], "up_blocks." + std::to_string(i) + ".resnets." + std::to_string(j));
}

template <class Fn>
void UNet::for_each_cross_attention(Fn fn) {
    auto each = [&](SpatialTransformer& t, const std::string& name) {
        for (size_t b = 0; b < t.blocks.size(); ++b)
            fn(t.blocks[b].attn2, name + ".transformer_blocks." + std::to_string(b) + ".attn2");
    };
    for (size_t i = 0; i < down_.size(); ++i)
        for (size_t j = 0; j < down_[i].attentions.size(); ++j)
            each(down_[i].attentions[j], "down_blocks." + std::to_string(i) + ".attentions." + std::to_string(j));
    each(mid_attention_, "mid_block.attentions.0");
    for (size_t i = 0; i < up_.size(); ++i)
        for (size_t j = 0; j < up_[i].attentions.size(); ++j)
            each(up_[i].attentions[j], "up_blocks." + std::to_string(i) + ".attentions." + std::to_string(j));
}

namespace {

// The block a weight belongs to, by the prefix forward reports ("up_blocks.1.attentions.0.",
// "mid_block.resnets.0.", "conv_in."), or "" for what no block owns (the time embedding, the output norm).
std::string block_of(const std::string& n) {
    if (n.rfind("down_blocks.", 0) == 0 || n.rfind("up_blocks.", 0) == 0 || n.rfind("mid_block.", 0) == 0) {
        const int parts = n.rfind("mid_block.", 0) == 0 ? 3 : 4;  // mid_block.resnets.0.
        size_t end = 0;
        for (int dots = 0; dots < parts && end != std::string::npos; ++dots) end = n.find('.', dots == 0 ? 0 : end + 1);
        return end == std::string::npos ? "" : n.substr(0, end + 1);
    }
    if (n.rfind("conv_in.", 0) == 0 || n.rfind("conv_out.", 0) == 0) return n.substr(0, n.find('.') + 1);
    return "";
}

// What streaming holds at once: what no block owns, and the `at_once` largest blocks. `block` names the block of
// an item ("" for none).
template <class Items, class BlockOf, class BytesOf>
int64_t streamed_bytes(const Items& items, BlockOf block, BytesOf bytes, size_t at_once) {
    std::map<std::string, int64_t> blocks;
    int64_t kept = 0;
    for (const auto& item : items) {
        const std::string b = block(item);
        (b.empty() ? kept : blocks[b]) += bytes(item);
    }
    std::vector<int64_t> sizes;
    for (const auto& [name, n] : blocks) sizes.push_back(n);
    std::sort(sizes.rbegin(), sizes.rend());
    for (size_t i = 0; i < sizes.size() && i < at_once; ++i) kept += sizes[i];
    return kept;
}

}  // namespace

int64_t UNet::streamed_page_bytes() const {
    return streamed_bytes(
        pages_.ranges(), [](const WeightPages::Range& r) { return block_of(r.name); },
        [](const WeightPages::Range& r) { return r.bytes; }, 1);
}

// The stacked k|v and time projections are read at the start of a call, before any block: they stay, even
// where a stack holds the weights of one block only (a level of one resnet).
std::string UNet::streamed_block(const DeviceWeights::Entry& e) const {
    for (const Tensor& t : kv_projections_)
        if (t.device_buffer() == e.buffer) return "";
    for (const Linear& p : time_projections_)
        if (p.weight.device_buffer() == e.buffer || p.bias.device_buffer() == e.buffer) return "";
    const std::string b = block_of(e.names.front());
    for (const std::string& n : e.names)
        if (block_of(n) != b) return "";
    return b;
}

int64_t UNet::streamed_device_bytes() const {
    return streamed_bytes(
        device_weights_.entries(), [this](const DeviceWeights::Entry& e) { return streamed_block(e); },
        [](const DeviceWeights::Entry& e) { return e.buffer->bytes(); }, 2);
}

int64_t UNet::streamed_block_bytes() const {
    int64_t sum = 0;
    for (const auto& [block, bytes] : streamed_block_sizes()) sum += bytes;
    return sum;
}

std::map<std::string, int64_t> UNet::streamed_block_sizes() const {
    std::map<std::string, int64_t> sizes;
    for (const DeviceWeights::Entry& e : device_weights_.entries())
        if (const std::string b = streamed_block(e); !b.empty()) sizes[b] += e.buffer->bytes();
    return sizes;
}

void UNet::place_for_streaming() const {
    streamed_blocks_.clear();
    streamed_next_.clear();
    streamed_last_.clear();
    bool moved = false;
    for (const DeviceWeights::Entry& e : device_weights_.entries()) {
        const std::string block = streamed_block(e);
        if (!block.empty()) {
            e.buffer->offload();
            streamed_blocks_[block].push_back(e.buffer.get());
        } else if (!e.buffer->resident()) {
            e.buffer->restore();
            moved = true;
        }
    }
    if (moved) device_weights_.forget_recordings();
}

void UNet::stream_in(const std::string& block) const {
    if (streamed_blocks_.empty()) return;
    Backend& backend = streamed_blocks_.begin()->second.front()->backend();
    if (auto it = streamed_blocks_.find(block); it != streamed_blocks_.end())
        for (DeviceBuffer* b : it->second) b->restore();  // nothing to do where fetched ahead
    backend.wait_for_uploads_ahead();  // before this block's work: its copies, fetched ahead or just now
    // The block that came after this one last time (the order of a call's blocks does not change): its copies
    // start now and overlap this block's work. Where the device has no room for them yet, it comes in its turn.
    if (!streamed_last_.empty() && !streamed_next_.count(streamed_last_)) streamed_next_[streamed_last_] = block;
    streamed_last_ = block;
    if (auto next = streamed_next_.find(block); next != streamed_next_.end())
        if (auto it = streamed_blocks_.find(next->second); it != streamed_blocks_.end())
            for (DeviceBuffer* b : it->second)
                if (!b->restore_ahead()) break;
}

bool UNet::streamed_block_resident(const std::string& block) const {
    auto it = streamed_blocks_.find(block);
    if (it == streamed_blocks_.end()) return false;
    for (const DeviceBuffer* b : it->second)
        if (!b->resident()) return false;
    return true;
}

void UNet::stream_out(const std::string& block) const {
    if (auto it = streamed_blocks_.find(block); it != streamed_blocks_.end())
        for (DeviceBuffer* b : it->second) b->offload();
}

Tensor UNet::forward(const UNetInputs& in) const {
    const UNetConfig& c = config_;
    require(in.sample && in.context, ErrorKind::InvalidArgument, "UNet: sample and context are required");
    const Tensor& x = *in.sample;
    const int64_t batch = x.dim(0);
    require(x.rank() == 4 && x.dim(1) == c.in_channels, ErrorKind::InvalidArgument,
            "UNet: sample of shape " + shape_str(x.shape()) + " for a model with " + std::to_string(c.in_channels) +
                " input channels");
    require(in.timesteps && in.timesteps->numel() == batch, ErrorKind::InvalidArgument,
            "UNet: one timestep per sample expected");
    require(in.context->rank() == 3 && in.context->dim(0) == batch && in.context->dim(2) == c.cross_attention_dim,
            ErrorKind::InvalidArgument,
            "UNet: context of shape " + shape_str(in.context->shape()) + ", expected [" + std::to_string(batch) +
                ", L, " + std::to_string(c.cross_attention_dim) + "]");

    const DType act = x.dtype();
    Tensor emb =
        ops::timestep_embedding(*in.timesteps, c.block_out_channels[0], c.flip_sin_to_cos, c.freq_shift, act);
    emb = time_linear_1_(emb);
    ops::silu_(emb);
    emb = time_linear_2_(emb);
    if (c.addition_time_embed_dim > 0) {
        require(in.text_embeds && in.time_ids, ErrorKind::InvalidArgument,
                "UNet: this model (SDXL) needs pooled text embeddings and time ids");
        require(in.time_ids->numel() == batch * 6, ErrorKind::InvalidArgument, "UNet: time ids must be [B, 6]");
        const int64_t d = c.addition_time_embed_dim, pooled = in.text_embeds->numel() / batch;
        require(pooled + 6 * d == c.projection_class_embeddings_input_dim, ErrorKind::InvalidArgument,
                "UNet: pooled text embeddings of width " + std::to_string(pooled) + " do not fit this model");
        Tensor time_emb =
            ops::timestep_embedding(*in.time_ids, static_cast<int>(d), c.flip_sin_to_cos, c.freq_shift, act);
        // [pooled text | embedded time ids] per sample: a concatenation along dim 1 of [B, ., 1] views.
        Tensor add = ops::concat_channels(in.text_embeds->reshaped({batch, pooled, 1}),
                                          std::move(time_emb).reshaped({batch, 6 * d, 1}))
                         .reshaped({batch, c.projection_class_embeddings_input_dim});
        Tensor aug = add_linear_1_(add);
        ops::silu_(aug);
        ops::add_(emb, add_linear_2_(aug));
    }
    ops::silu_(emb);  // every resnet applies SiLU before its time projection
    std::vector<Tensor> kv;  // per width, [N, L, 2 k dim]: every cross-attention's k | v of the context
    for (const Tensor& w : kv_projections_) kv.push_back(ops::linear(*in.context, w, nullptr));
    std::vector<Tensor> time;  // per width, [N, k C]: every block's time projection
    for (const Linear& p : time_projections_) time.push_back(p(emb));
    auto resnet = [&](const ResnetBlock& b, const Tensor& x) { return b(x, time[size_t(b.time_group)]); };

    // Each down output is the next block's input and a skip: it moves into skips and is read from there (a
    // copy of a device tensor is a copy of its storage).
    auto done = [&](const std::string& block) {
        if (in.after_block) (*in.after_block)(block);
    };
    auto start = [&](const std::string& block) {
        if (in.before_block) (*in.before_block)(block);
    };
    auto part = [](const char* level, size_t i, const char* kind, size_t j) {
        return std::string(level) + "." + std::to_string(i) + "." + kind + "." + std::to_string(j) + ".";
    };

    std::vector<Tensor> skips;
    start("conv_in.");
    skips.push_back(conv_in_(x));
    done("conv_in.");
    for (size_t i = 0; i < down_.size(); ++i) {
        const DownLevel& level = down_[i];
        for (size_t j = 0; j < level.resnets.size(); ++j) {
            start(part("down_blocks", i, "resnets", j));
            Tensor h = resnet(level.resnets[j], skips.back());
            done(part("down_blocks", i, "resnets", j));
            if (!level.attentions.empty()) {
                start(part("down_blocks", i, "attentions", j));
                level.attentions[j].add_to(h, kv);
                done(part("down_blocks", i, "attentions", j));
            }
            skips.push_back(std::move(h));
        }
        if (level.has_downsampler) {
            start(part("down_blocks", i, "downsamplers", 0));
            Tensor h = level.downsampler(skips.back());
            done(part("down_blocks", i, "downsamplers", 0));
            skips.push_back(std::move(h));
        }
    }
    start("mid_block.resnets.0.");
    Tensor h = resnet(mid_resnet_0_, skips.back());
    done("mid_block.resnets.0.");
    start("mid_block.attentions.0.");
    mid_attention_.add_to(h, kv);
    done("mid_block.attentions.0.");
    start("mid_block.resnets.1.");
    h = resnet(mid_resnet_1_, h);
    done("mid_block.resnets.1.");
    for (size_t i = 0; i < up_.size(); ++i) {
        const UpLevel& level = up_[i];
        for (size_t j = 0; j < level.resnets.size(); ++j) {
            start(part("up_blocks", i, "resnets", j));
            h = resnet(level.resnets[j], ops::concat_channels(h, skips.back()));
            done(part("up_blocks", i, "resnets", j));
            skips.pop_back();
            if (!level.attentions.empty()) {
                start(part("up_blocks", i, "attentions", j));
                level.attentions[j].add_to(h, kv);
                done(part("up_blocks", i, "attentions", j));
            }
        }
        if (level.has_upsampler) {
            start(part("up_blocks", i, "upsamplers", 0));
            h = upsample_then_conv(h, skips.back().dim(2), skips.back().dim(3), level.upsampler);
            done(part("up_blocks", i, "upsamplers", 0));
        }
    }
    h = norm_out_(h);
    ops::silu_(h);
    start("conv_out.");
    h = conv_out_(h);
    done("conv_out.");
    return h;
}

}  // namespace kiln
