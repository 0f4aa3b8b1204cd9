#include "rng/checked_numel.h"

#include "kiln/error.h"

namespace kiln {

namespace {
constexpr int64_t kMaxElements = (int64_t{1} << 31) - 1;  // 8 GiB of float32: far beyond any latent
}

int64_t checked_numel(const Shape& shape, const std::string& who) {
    for (int64_t d : shape)
        require(d >= 0, ErrorKind::InvalidArgument, who + ": negative dimension in shape " + shape_str(shape));
    int64_t n = 1;
    for (int64_t d : shape) {
        if (d == 0) return 0;
        require(n <= kMaxElements / d, ErrorKind::InvalidArgument,
                who + ": shape " + shape_str(shape) + " has more than 2^31 - 1 elements");
        n *= d;
    }
    return n;
}

}  // namespace kiln
