// Where samplers and pipelines get their Gaussian noise. Implementations reproduce other tools'
// random streams (torch's CPU and CUDA generators, see src/rng/); a stream is stateful, so the order
// of calls matters exactly as it does in diffusers.
#pragma once
#include "core/tensor.h"

namespace kiln {

class NoiseGenerator {
public:
    virtual ~NoiseGenerator() = default;
    // Standard normal samples of the given shape: the next values of this generator's stream.
    virtual Tensor randn(const Shape& shape) = 0;
};

}  // namespace kiln
