// Finds the one shape in a kiln-shapes picture from its pixels alone: the background is the median
// colour of the image border, the shape is every pixel far from it. What the e2e tests judge
// position and colour by.
#pragma once
#include <array>
#include <map>
#include <string>

#include "image/png.h"

namespace kiln::test {

using Rgb = std::array<double, 3>;

struct FoundShape {
    Rgb background{};       // per-channel median of the border pixels
    double area = 0;        // fraction of the image's pixels that belong to the shape
    double cx = 0, cy = 0;  // the shape's centroid in [0, 1] (x to the right, y down)
    Rgb colour{};           // per-channel median of the shape's pixels
};

// `threshold`: the Euclidean RGB distance (0-255 scale) from the background above which a pixel is
// the shape's. `border`: how many pixels wide the border ring is.
FoundShape find_shape(const Image& image, double threshold, int border = 3);

// The palette entry nearest to `colour` (Euclidean RGB distance).
std::string nearest_colour(const Rgb& colour, const std::map<std::string, Rgb>& palette);

}  // namespace kiln::test
