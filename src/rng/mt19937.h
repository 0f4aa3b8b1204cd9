// The Mersenne Twister behind torch's CPU generator (at::mt19937), so that seeds reproduce torch's
// CPU random streams. Only the low 32 bits of the seed reach the state, exactly as in torch:
// torch.manual_seed(2**40 + 7) gives the same stream as manual_seed(7).
#pragma once
#include <array>
#include <cstdint>

namespace kiln {

class Mt19937 {
public:
    explicit Mt19937(uint64_t seed);
    uint32_t next_u32();
    // Two draws joined high word first, as torch's CPUGeneratorImpl::random64.
    uint64_t next_u64();

private:
    void regenerate();

    static constexpr int kStateSize = 624;
    std::array<uint32_t, kStateSize> state_{};
    int next_ = kStateSize;  // index of the next state word to temper; kStateSize forces a regeneration
};

}  // namespace kiln
