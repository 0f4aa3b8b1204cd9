// The SD VAE, computed as diffusers' AutoencoderKL computes it (Encoder -> quant_conv -> diagonal
// Gaussian; post_quant_conv -> Decoder), in float32.
#pragma once
#include <vector>

#include "core/tensor.h"
#include "models/vae/vae_blocks.h"
#include "models/vae/vae_config.h"
#include "models/weight_source.h"

namespace kiln {

class Vae {
public:
    // Reads every tensor by its diffusers name (encoder.*, decoder.*, quant_conv.*, post_quant_conv.*),
    // checking shapes against `config`; a missing, misshapen or unexpected tensor is InvalidModel.
    // Without `with_encoder` the encoder's tensors (encoder.*, quant_conv.*) are neither read nor
    // checked: txt2img only decodes, and SD's encoder is 34M parameters (65 MiB in fp16).
    static Vae load(const WeightSource& source, const VaeConfig& config, bool with_encoder = true);

    const VaeConfig& config() const { return config_; }
    // The dtype of its weights: on a GPU also its activations'.
    DType weight_dtype() const { return dec_conv_in_.w.dtype(); }
    bool has_encoder() const { return has_encoder_; }

    // Raw latents [N, latent_channels, h, w] (no scaling_factor applied) -> image [N, out_channels,
    // h*f, w*f] in about [-1, 1], f = config().downsample_factor().
    Tensor decode(const Tensor& latents) const;
    // The weights' pages in the mapped file (empty unless they are views of it: on the CPU).
    const WeightPages& pages() const { return pages_; }
    // The weights' device storage (empty on the CPU), which a --vram budget moves off the device and back.
    const DeviceWeights& device_weights() const { return device_weights_; }

    // decode() a band of rows at a time from the mid block on, each GroupNorm with the whole image's statistics:
    // the same image up to float rounding, with the device (or, on the CPU, the scratch) holding one band's
    // tensors of about band_bytes and the host one or two whole activations (vae_tiled_decode.cpp); with
    // park_on_device, a GPU holds those activations instead (in its dtype: no transfers, a band's scratch
    // instead of the whole decode's). Returns the image on the host, float32.
    Tensor decode_tiled(const Tensor& latents, int64_t band_bytes, bool park_on_device = false) const;

    // The posterior of an image [N, in_channels, H, W] in [-1, 1]: mean and std, [N, latent, H/f, W/f].
    // logvar is clamped to [-30, 20] and std = exp(logvar / 2), as DiagonalGaussianDistribution.
    struct Posterior {
        Tensor mean, std;
    };
    // Throws InvalidArgument when the VAE was loaded without its encoder.
    Posterior encode(const Tensor& image) const;
    // encode() a band of rows at a time up to its mid block, each GroupNorm with the whole image's statistics:
    // the same posterior up to float rounding, with the device (or, on the CPU, the scratch) holding one band's
    // tensors of about band_bytes and the host the parked activations (vae_tiled_encode.cpp); with
    // park_on_device, a GPU holds those instead (in its dtype).
    Posterior encode_tiled(const Tensor& image, int64_t band_bytes, bool park_on_device = false) const;

private:
    WeightPages pages_;
    DeviceWeights device_weights_;
    // The decoder up to and with its mid block (whole in both decodes: latent size, global attention), after
    // checking the latents' shape.
    Tensor decode_to_mid_block(const Tensor& latents) const;
    // The encoder's checks of its input (the encoder loaded, the image's shape), and its part from the mid block
    // on (whole in both encodes: latent size, global attention) with the posterior made of its moments.
    void check_encode_input(const Tensor& image) const;
    Posterior encode_from_mid_block(Tensor x) const;

    struct Level {
        std::vector<vae::Resnet> resnets;
        std::optional<vae::Conv> resample;  // downsampler (encoder) or upsampler (decoder)
    };

    VaeConfig config_;
    bool has_encoder_ = false;
    // Encoder
    vae::Conv enc_conv_in_, enc_conv_out_;
    std::vector<Level> down_;
    vae::MidBlock enc_mid_;
    vae::Norm enc_norm_out_;
    std::optional<vae::Conv> quant_conv_;
    // Decoder
    std::optional<vae::Conv> post_quant_conv_;
    vae::Conv dec_conv_in_, dec_conv_out_;
    vae::MidBlock dec_mid_;
    std::vector<Level> up_;  // diffusers order: up_[0] works at the lowest resolution
    vae::Norm dec_norm_out_;
};

}  // namespace kiln
