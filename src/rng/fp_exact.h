// Bit-exact float arithmetic for the RNG emulations: every product and sum below must round exactly
// where the emulated code rounds. The compiler must not fuse a*b+c on its own (GCC does by default
// with -mfma); the emulations write std::fma where the emulated machine code has a fused op.
// Include this after all other headers of a .cpp file.
#pragma once

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <cstdint>
#include <cstring>

namespace kiln::fp {

inline uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

inline float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

}  // namespace kiln::fp
