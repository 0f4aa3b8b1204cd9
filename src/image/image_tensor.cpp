// Conversions between 8-bit images and the [0,1] float tensors around the VAE.
#include <cmath>

#include "image/png.h"
#include "kiln/error.h"

namespace kiln {

Image image_from_tensor(const Tensor& chw01) {
    const Shape& s = chw01.shape();
    const bool chw = s.size() == 3 && s[0] == 3;
    const bool nchw = s.size() == 4 && s[0] == 1 && s[1] == 3;
    require(chw || nchw, ErrorKind::InvalidArgument,
            "image_from_tensor expects a [3,H,W] or [1,3,H,W] tensor, got " + shape_str(s));
    const int64_t height = s[s.size() - 2], width = s[s.size() - 1];
    require(height > 0 && width > 0 && height <= (1 << 20) && width <= (1 << 20), ErrorKind::InvalidArgument,
            "image_from_tensor: image size " + shape_str(s) + " is empty or too large");
    Image image;
    image.width = static_cast<int>(width);
    image.height = static_cast<int>(height);
    image.channels = 3;
    const int64_t plane = width * height;
    image.pixels.resize(plane * 3);
    const float* src = chw01.data();
    for (int64_t c = 0; c < 3; ++c) {
        for (int64_t i = 0; i < plane; ++i) {
            const float x = src[c * plane + i];
            // numpy_to_pil: (x * 255).round() on float32 after clamping; numpy rounds half to even,
            // which nearbyint does in the default rounding mode. NaN (undefined there) becomes 0.
            const float clamped = std::isnan(x) ? 0.0f : std::fmin(std::fmax(x, 0.0f), 1.0f);
            image.pixels[i * 3 + c] = static_cast<uint8_t>(std::nearbyint(clamped * 255.0f));
        }
    }
    return image;
}

Tensor tensor_from_image(const Image& image) {
    require(image.width > 0 && image.height > 0, ErrorKind::InvalidArgument,
            "tensor_from_image: empty image (" + std::to_string(image.width) + "x" + std::to_string(image.height) + ")");
    require(image.channels == 1 || image.channels == 3 || image.channels == 4, ErrorKind::InvalidArgument,
            "tensor_from_image: " + std::to_string(image.channels) + " channels (expected 1, 3 or 4)");
    const int64_t plane = int64_t(image.width) * image.height;
    require(static_cast<uint64_t>(plane * image.channels) == image.pixels.size(), ErrorKind::InvalidArgument,
            "tensor_from_image: " + std::to_string(image.pixels.size()) + " bytes of pixels for a " +
                std::to_string(image.width) + "x" + std::to_string(image.height) + "x" +
                std::to_string(image.channels) + " image");
    Tensor out({1, 3, image.height, image.width});
    float* dst = out.data();
    for (int64_t c = 0; c < 3; ++c) {
        const int64_t source_channel = image.channels == 1 ? 0 : c;
        for (int64_t i = 0; i < plane; ++i)
            dst[c * plane + i] = image.pixels[i * image.channels + source_channel] / 255.0f;
    }
    return out;
}

}  // namespace kiln
