#include "rng/mt19937.h"

namespace kiln {

namespace {
constexpr int kShift = 397;  // MT19937's middle word offset (m)
constexpr uint32_t kMatrixA = 0x9908b0dfu;
constexpr uint32_t kUpperMask = 0x80000000u;
constexpr uint32_t kLowerMask = 0x7fffffffu;
}  // namespace

Mt19937::Mt19937(uint64_t seed) {
    // Knuth's initialisation (init_genrand) of the reference MT19937; torch truncates the seed to 32 bits.
    state_[0] = static_cast<uint32_t>(seed & 0xffffffffu);
    for (int i = 1; i < kStateSize; ++i) {
        const uint32_t prev = state_[i - 1];
        state_[i] = 1812433253u * (prev ^ (prev >> 30)) + static_cast<uint32_t>(i);
    }
    next_ = kStateSize;
}

void Mt19937::regenerate() {
    for (int i = 0; i < kStateSize; ++i) {
        const uint32_t joined = (state_[i] & kUpperMask) | (state_[(i + 1) % kStateSize] & kLowerMask);
        state_[i] = state_[(i + kShift) % kStateSize] ^ (joined >> 1) ^ ((joined & 1u) ? kMatrixA : 0u);
    }
    next_ = 0;
}

uint32_t Mt19937::next_u32() {
    if (next_ >= kStateSize) regenerate();
    uint32_t y = state_[next_++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

uint64_t Mt19937::next_u64() {
    const uint64_t hi = next_u32();
    const uint64_t lo = next_u32();
    return (hi << 32) | lo;
}

}  // namespace kiln
