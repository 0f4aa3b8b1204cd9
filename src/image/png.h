// 8-bit images, PNG files (through libpng) with their text chunks, and the conversion between
// images and the float tensors the VAE works with.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace kiln {

// 8 bits per sample, rows top to bottom, samples interleaved (RGBRGB...).
// channels: 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA.
struct Image {
    int width = 0, height = 0, channels = 3;
    std::vector<uint8_t> pixels;
};

using TextChunks = std::vector<std::pair<std::string, std::string>>;  // (keyword, text), UTF-8

inline constexpr uint64_t kMaxPngPixels = uint64_t(1) << 28;  // 16384 x 16384

// Any PNG (gray, gray+alpha, RGB, RGBA, palette; 1 to 16 bits; interlaced or not) as 8-bit RGB.
// Alpha, including palette/tRNS transparency, is dropped (not composited), as PIL's
// convert("RGB") does; 16-bit samples are scaled to 8 bits with rounding; no gamma correction.
// Throws kiln::Error naming the file: IO when it cannot be read, InvalidArgument when it is not a
// PNG, is corrupt or truncated, or is larger than kMaxPngPixels.
Image read_png(const std::string& path);

// Writes `image` (channels 1-4) with one text chunk per (keyword, text): tEXt (Latin-1 bytes) when
// the text only uses code points up to U+00FF, otherwise iTXt (UTF-8), both uncompressed, before
// the image data. The file is written under a temporary name in the same directory and renamed
// over `path`, so a failed write never leaves a partial file. Keywords must be 1-79 printable
// Latin-1 characters without leading, trailing or double spaces (the PNG rule); texts must be valid
// UTF-8 without NUL.
void write_png(const std::string& path, const Image& image, const TextChunks& text);

// The tEXt, zTXt and iTXt chunks in file order (before and after the image data), as UTF-8.
// tEXt/zTXt are Latin-1 by the PNG spec, but stable-diffusion.cpp and others put raw UTF-8 there:
// bytes that form valid UTF-8 are kept as they are, anything else is decoded as Latin-1.
TextChunks read_png_text(const std::string& path);

// A float image [3,H,W] or [1,3,H,W] with values in [0,1] to 8-bit RGB, as diffusers'
// numpy_to_pil does: clamp to [0,1], then (x*255).round() in float32 with round-half-to-even.
Image image_from_tensor(const Tensor& chw01);

// 8-bit image (1, 3 or 4 channels; gray is replicated, alpha dropped) to [1,3,H,W], value/255.
Tensor tensor_from_image(const Image& image);

}  // namespace kiln
