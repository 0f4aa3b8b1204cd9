#include "rng/philox.h"

#include <cassert>

namespace kiln {

namespace {
// Salmon et al., "Parallel random numbers: as easy as 1, 2, 3" (SC'11): Philox4x32 constants.
constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1
}  // namespace

Philox4 philox4x32_10(Philox4 c, uint32_t k0, uint32_t k1) {
    for (int round = 0; round < 10; ++round) {
        const uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
        const uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
        c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k0, static_cast<uint32_t>(p1),
             static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k1, static_cast<uint32_t>(p0)};
        k0 += kWeyl0;
        k1 += kWeyl1;
    }
    return c;
}

CurandPhilox::CurandPhilox(uint64_t seed, uint64_t subsequence, uint64_t offset)
    : key_lo_(static_cast<uint32_t>(seed)), key_hi_(static_cast<uint32_t>(seed >> 32)) {
    assert(offset % 4 == 0);
    advance_subsequence(subsequence);
    advance(offset / 4);
}

// The carry logic mirrors cuRAND's so that counters near 2^64 wrap the same way.
void CurandPhilox::advance(uint64_t n) {
    const uint32_t lo = static_cast<uint32_t>(n);
    uint32_t hi = static_cast<uint32_t>(n >> 32);
    counter_[0] += lo;
    if (counter_[0] < lo) ++hi;
    counter_[1] += hi;
    if (hi <= counter_[1]) return;
    if (++counter_[2]) return;
    ++counter_[3];
}

void CurandPhilox::advance_subsequence(uint64_t n) {
    const uint32_t lo = static_cast<uint32_t>(n);
    uint32_t hi = static_cast<uint32_t>(n >> 32);
    counter_[2] += lo;
    if (counter_[2] < lo) ++hi;
    counter_[3] += hi;
}

Philox4 CurandPhilox::next4() {
    const Philox4 out = philox4x32_10(counter_, key_lo_, key_hi_);
    if (++counter_[0] == 0 && ++counter_[1] == 0 && ++counter_[2] == 0) ++counter_[3];
    return out;
}

}  // namespace kiln
