// The shape finder on pictures drawn here, where the answer is known by construction.
#include <gtest/gtest.h>

#include "e2e/shape_finder.h"

using namespace kiln;
using namespace kiln::test;

namespace {

// A w x h picture of `background` with an axis-aligned rectangle [x0, x1) x [y0, y1) of `fill`.
Image picture(int w, int h, Rgb background, Rgb fill, int x0, int y0, int x1, int y1) {
    Image img;
    img.width = w;
    img.height = h;
    img.pixels.resize(size_t(w) * h * 3);
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) {
            const Rgb& c = (x >= x0 && x < x1 && y >= y0 && y < y1) ? fill : background;
            for (int k = 0; k < 3; ++k) img.pixels[(size_t(y) * w + x) * 3 + k] = static_cast<uint8_t>(c[k]);
        }
    return img;
}

}  // namespace

TEST(ShapeFinder, FindsARectangleItsCentroidAreaAndColour) {
    // 20x10 block at x 10..29, y 40..49 in a 128x128 picture: centroid (20, 45) / 128, area 200 / 16384.
    const Image img = picture(128, 128, {30, 70, 220}, {220, 30, 30}, 10, 40, 30, 50);
    const FoundShape s = find_shape(img, 40);
    EXPECT_EQ(s.background, (Rgb{30, 70, 220}));
    EXPECT_EQ(s.colour, (Rgb{220, 30, 30}));
    EXPECT_DOUBLE_EQ(s.area, 200.0 / (128 * 128));
    EXPECT_DOUBLE_EQ(s.cx, 20.0 / 128);
    EXPECT_DOUBLE_EQ(s.cy, 45.0 / 128);
}

TEST(ShapeFinder, PixelsNearTheBackgroundAreNotTheShape) {
    // distance |(10, 10, 10)| = 17.3 from the background: under a threshold of 20, over one of 15.
    const Image img = picture(64, 64, {100, 100, 100}, {110, 110, 110}, 20, 20, 40, 40);
    EXPECT_EQ(find_shape(img, 20).area, 0.0);
    EXPECT_DOUBLE_EQ(find_shape(img, 15).area, 400.0 / (64 * 64));
}

TEST(ShapeFinder, NearestPaletteColour) {
    const std::map<std::string, Rgb> palette = {{"red", {220, 30, 30}}, {"orange", {250, 140, 20}}};
    EXPECT_EQ(nearest_colour({200, 60, 40}, palette), "red");
    EXPECT_EQ(nearest_colour({240, 120, 30}, palette), "orange");
}

TEST(ShapeFinder, EmptyImageFindsNothing) {
    const FoundShape s = find_shape(Image{}, 40);
    EXPECT_EQ(s.area, 0.0);
}
