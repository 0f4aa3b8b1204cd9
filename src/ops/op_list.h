// The one list of op kinds (DESIGN decision 4). Every table indexed by op kind (the enum, the names,
// the profiler's counters, the test harness's case dispatch) is generated from KILN_OP_LIST, so adding
// an op here without its name, reference or test case does not compile.
#pragma once

// X(Kind, function_name): Kind names the enum value, function_name is the public function in ops.h
// (and in ops::ref), stringified for op_name().
#define KILN_OP_LIST(X)          \
    X(Linear, linear)            \
    X(Conv2d, conv2d)            \
    X(GroupNorm, group_norm)     \
    X(LayerNorm, layer_norm)     \
    X(Attention, attention)      \
    X(Silu, silu_)               \
    X(Gelu, gelu_)               \
    X(GeluTanh, gelu_tanh_)      \
    X(QuickGelu, quick_gelu_)    \
    X(Geglu, geglu)              \
    X(UpsampleNearest2x, upsample_nearest2x) \
    X(ConcatChannels, concat_channels)       \
    X(Add, add_)                 \
    X(AddChannelBias, add_channel_bias_)     \
    X(Scale, scale_)             \
    X(NchwToNlc, nchw_to_nlc)    \
    X(NlcToNchw, nlc_to_nchw)    \
    X(SoftmaxLastdim, softmax_lastdim)       \
    X(TimestepEmbedding, timestep_embedding)

namespace kiln::ops {

enum class OpKind {
#define KILN_OP_ENUM(kind, fn) kind,
    KILN_OP_LIST(KILN_OP_ENUM)
#undef KILN_OP_ENUM
};

#define KILN_OP_COUNT(kind, fn) +1
constexpr int kOpCount = 0 KILN_OP_LIST(KILN_OP_COUNT);
#undef KILN_OP_COUNT

// The public function's name ("linear", "silu_", ...); "unknown" for a value outside the list.
const char* op_name(OpKind kind);

}  // namespace kiln::ops
