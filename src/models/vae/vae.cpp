#include "models/vae/vae.h"

#include <algorithm>
#include <cmath>

#include "kiln/error.h"
#include "ops/ops.h"

namespace kiln {

Vae Vae::load(const WeightSource& source, const VaeConfig& config, bool with_encoder) {
    config.validate(source.describe());
    using vae::Conv;
    using vae::MidBlock;
    using vae::Norm;
    using vae::Resnet;
    const std::vector<int>& ch = config.block_out_channels;
    const int levels = static_cast<int>(ch.size());
    const int64_t latent = config.latent_channels, top = ch.back();
    WeightReader r(source);
    Vae v;
    v.config_ = config;
    v.has_encoder_ = with_encoder;

    if (with_encoder) {  // txt2img decodes only
        v.enc_conv_in_ = Conv::load(r, "encoder.conv_in", config.in_channels, ch[0], 3);
        for (int i = 0; i < levels; ++i) {
            const std::string p = "encoder.down_blocks." + std::to_string(i);
            Level level;
            for (int j = 0; j < config.layers_per_block; ++j)
                level.resnets.push_back(Resnet::load(r, p + ".resnets." + std::to_string(j),
                                                     j == 0 ? ch[std::max(i - 1, 0)] : ch[i], ch[i]));
            if (i + 1 < levels) level.resample = Conv::load(r, p + ".downsamplers.0.conv", ch[i], ch[i], 3);
            v.down_.push_back(std::move(level));
        }
        v.enc_mid_ = MidBlock::load(r, "encoder.mid_block", top, config.mid_block_add_attention);
        v.enc_norm_out_ = Norm::load(r, "encoder.conv_norm_out", top);
        v.enc_conv_out_ = Conv::load(r, "encoder.conv_out", top, 2 * latent, 3);  // mean and logvar
        if (config.use_quant_conv) v.quant_conv_ = Conv::load(r, "quant_conv", 2 * latent, 2 * latent, 1);
    }

    if (config.use_post_quant_conv) v.post_quant_conv_ = Conv::load(r, "post_quant_conv", latent, latent, 1);
    v.dec_conv_in_ = Conv::load(r, "decoder.conv_in", latent, top, 3);
    v.dec_mid_ = MidBlock::load(r, "decoder.mid_block", top, config.mid_block_add_attention);
    int64_t prev = top;
    for (int i = 0; i < levels; ++i) {
        const std::string p = "decoder.up_blocks." + std::to_string(i);
        const int64_t out = ch[levels - 1 - i];
        Level level;
        for (int j = 0; j <= config.layers_per_block; ++j)  // the decoder has one resnet more per level
            level.resnets.push_back(Resnet::load(r, p + ".resnets." + std::to_string(j), j == 0 ? prev : out, out));
        if (i + 1 < levels) level.resample = Conv::load(r, p + ".upsamplers.0.conv", out, out, 3);
        v.up_.push_back(std::move(level));
        prev = out;
    }
    v.dec_norm_out_ = Norm::load(r, "decoder.conv_norm_out", ch[0]);
    v.dec_conv_out_ = Conv::load(r, "decoder.conv_out", ch[0], config.out_channels, 3);
    r.check_all_used([with_encoder](const std::string& name) {
        return !with_encoder && (name.rfind("encoder.", 0) == 0 || name.rfind("quant_conv.", 0) == 0);
    });
    v.pages_ = r.take_pages();
    v.device_weights_ = r.take_device_weights();
    return v;
}

Tensor Vae::decode_to_mid_block(const Tensor& latents) const {
    require(latents.rank() == 4 && latents.dim(1) == config_.latent_channels && latents.dim(0) > 0 &&
                latents.dim(2) > 0 && latents.dim(3) > 0,
            ErrorKind::InvalidArgument,
            "VAE decode: latents of shape " + shape_str(latents.shape()) + ", expected [N, " +
                std::to_string(config_.latent_channels) + ", h, w]");
    Tensor x = ops::on_device_of(latents, dec_conv_in_.w);
    if (post_quant_conv_) x = ops::conv2d(x, post_quant_conv_->w, &post_quant_conv_->b);
    x = ops::conv2d(x, dec_conv_in_.w, &dec_conv_in_.b, 1, 1);
    return dec_mid_.forward(std::move(x), config_.norm_num_groups);
}

Tensor Vae::decode(const Tensor& latents) const {
    const int groups = config_.norm_num_groups;
    // Each stage replaces x, so only the current activation and a block's temporaries are alive.
    Tensor x = decode_to_mid_block(latents);
    for (const Level& level : up_) {
        for (const vae::Resnet& res : level.resnets) x = res.forward(std::move(x), groups);
        if (level.resample) x = vae::upsample(x, *level.resample);
    }
    return vae::norm_silu_conv(x, dec_norm_out_, groups, dec_conv_out_);
}

void Vae::check_encode_input(const Tensor& image) const {
    require(has_encoder_, ErrorKind::InvalidArgument,
            "VAE encode: the VAE was loaded without its encoder (LoadOptions::vae_encoder is false)");
    const int64_t f = config_.downsample_factor();
    require(image.rank() == 4 && image.dim(1) == config_.in_channels && image.dim(0) > 0, ErrorKind::InvalidArgument,
            "VAE encode: image of shape " + shape_str(image.shape()) + ", expected [N, " +
                std::to_string(config_.in_channels) + ", H, W]");
    require(image.dim(2) >= f && image.dim(3) >= f, ErrorKind::InvalidArgument,
            "VAE encode: image of " + std::to_string(image.dim(3)) + "x" + std::to_string(image.dim(2)) +
                " is smaller than the VAE's downsampling factor " + std::to_string(f));
}

Vae::Posterior Vae::encode(const Tensor& image) const {
    check_encode_input(image);
    const int groups = config_.norm_num_groups;
    Tensor x = ops::conv2d(ops::on_device_of(image, enc_conv_in_.w), enc_conv_in_.w, &enc_conv_in_.b, 1, 1);
    for (const Level& level : down_) {
        for (const vae::Resnet& res : level.resnets) x = res.forward(std::move(x), groups);
        if (level.resample) x = vae::downsample(x, *level.resample);
    }
    return encode_from_mid_block(std::move(x));
}

Vae::Posterior Vae::encode_from_mid_block(Tensor x) const {
    const int groups = config_.norm_num_groups;
    x = ops::on_device_of(std::move(x), enc_conv_in_.w);
    x = enc_mid_.forward(std::move(x), groups);
    x = vae::norm_silu_conv(x, enc_norm_out_, groups, enc_conv_out_);
    if (quant_conv_) x = ops::conv2d(x, quant_conv_->w, &quant_conv_->b);
    x = x.on_device() ? x.to_host() : std::move(x);

    // moments [N, 2L, h, w] = mean (first L channels) then logvar.
    const int64_t n = x.dim(0), latent = config_.latent_channels, plane = x.dim(2) * x.dim(3);
    Posterior post{Tensor({n, latent, x.dim(2), x.dim(3)}), Tensor({n, latent, x.dim(2), x.dim(3)})};
    const int64_t half = latent * plane;
    for (int64_t b = 0; b < n; ++b) {
        const float* src = x.data() + b * 2 * half;
        float* mean = post.mean.data() + b * half;
        float* std = post.std.data() + b * half;
        for (int64_t i = 0; i < half; ++i) {
            mean[i] = src[i];
            std[i] = std::exp(0.5f * std::clamp(src[half + i], -30.0f, 20.0f));
        }
    }
    return post;
}

}  // namespace kiln
