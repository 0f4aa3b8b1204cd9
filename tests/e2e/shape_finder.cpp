#include "e2e/shape_finder.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace kiln::test {

namespace {

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    const size_t mid = v.size() / 2;
    std::nth_element(v.begin(), v.begin() + mid, v.end());
    return v[mid];
}

double distance(const Rgb& a, const Rgb& b) {
    return std::sqrt((a[0] - b[0]) * (a[0] - b[0]) + (a[1] - b[1]) * (a[1] - b[1]) + (a[2] - b[2]) * (a[2] - b[2]));
}

}  // namespace

FoundShape find_shape(const Image& image, double threshold, int border) {
    FoundShape found;
    const int w = image.width, h = image.height, ch = image.channels;
    if (w <= 0 || h <= 0 || ch < 3) return found;
    auto pixel = [&](int x, int y) {
        const uint8_t* p = &image.pixels[(static_cast<size_t>(y) * w + x) * ch];
        return Rgb{double(p[0]), double(p[1]), double(p[2])};
    };

    std::array<std::vector<double>, 3> ring;
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x)
            if (x < border || y < border || x >= w - border || y >= h - border) {
                const Rgb c = pixel(x, y);
                for (int k = 0; k < 3; ++k) ring[k].push_back(c[k]);
            }
    for (int k = 0; k < 3; ++k) found.background[k] = median(ring[k]);

    std::array<std::vector<double>, 3> inside;
    double sx = 0, sy = 0;
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) {
            const Rgb c = pixel(x, y);
            if (distance(c, found.background) <= threshold) continue;
            for (int k = 0; k < 3; ++k) inside[k].push_back(c[k]);
            sx += x + 0.5;
            sy += y + 0.5;
        }
    const double n = static_cast<double>(inside[0].size());
    found.area = n / (double(w) * h);
    if (n > 0) {
        found.cx = sx / n / w;
        found.cy = sy / n / h;
        for (int k = 0; k < 3; ++k) found.colour[k] = median(inside[k]);
    }
    return found;
}

std::string nearest_colour(const Rgb& colour, const std::map<std::string, Rgb>& palette) {
    std::string best;
    double best_d = std::numeric_limits<double>::infinity();
    for (const auto& [name, rgb] : palette) {
        const double d = distance(colour, rgb);
        if (d < best_d) {
            best_d = d;
            best = name;
        }
    }
    return best;
}

}  // namespace kiln::test
