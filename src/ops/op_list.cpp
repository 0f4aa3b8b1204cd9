#include "ops/op_list.h"

namespace kiln::ops {

namespace {
constexpr const char* kOpNames[] = {
#define KILN_OP_NAME(kind, fn) #fn,
    KILN_OP_LIST(KILN_OP_NAME)
#undef KILN_OP_NAME
};
// The API in ops.h has exactly this many ops; a new op must be added to the list (and so to every table).
static_assert(kOpCount == 19, "KILN_OP_LIST and the ops declared in ops.h disagree");
static_assert(sizeof(kOpNames) / sizeof(kOpNames[0]) == kOpCount);
}  // namespace

const char* op_name(OpKind kind) {
    const int i = static_cast<int>(kind);
    return i >= 0 && i < kOpCount ? kOpNames[i] : "unknown";
}

}  // namespace kiln::ops
