// Philox4x32-10 counter-based generator with the state handling of cuRAND's
// curandStatePhilox4_32_10_t (curand_init / curand4), as torch's CUDA kernels use it.
#pragma once
#include <array>
#include <cstdint>

namespace kiln {

using Philox4 = std::array<uint32_t, 4>;

// The Philox4x32 block function with 10 rounds: 128-bit counter, 64-bit key.
Philox4 philox4x32_10(Philox4 counter, uint32_t key_lo, uint32_t key_hi);

// One thread's cuRAND Philox stream. curand_init(seed, subsequence, offset) places the counter at
// subsequence * 2^64 + offset / 4 blocks; offset must be a multiple of 4 here (torch always
// rounds its offsets to multiples of 4, so the partial-block state of cuRAND is never needed).
class CurandPhilox {
public:
    CurandPhilox(uint64_t seed, uint64_t subsequence, uint64_t offset);
    // curand4(): the next four 32-bit outputs.
    Philox4 next4();

private:
    void advance(uint64_t blocks);             // cuRAND's Philox_State_Incr(state, n)
    void advance_subsequence(uint64_t count);  // cuRAND's Philox_State_Incr_hi(state, n)

    Philox4 counter_{};
    uint32_t key_lo_ = 0;
    uint32_t key_hi_ = 0;
};

}  // namespace kiln
