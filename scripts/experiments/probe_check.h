// What the standalone cuDNN probes share (they build alone on the GPU machine, without kiln's libraries):
// CK(call) prints the call, its place and its status and exits when the status is not 0 (success for the CUDA
// runtime and cuDNN alike).
#pragma once
#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                  \
    do {                                                                       \
        auto s_ = (x);                                                         \
        if (s_ != 0) {                                                         \
            std::printf("%s:%d %s -> %d\n", __FILE__, __LINE__, #x, int(s_)); \
            std::exit(1);                                                      \
        }                                                                      \
    } while (0)
