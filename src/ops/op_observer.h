// A hook for the profiler: every op reports when it starts and ends. With no observer set the cost is
// one load and a not-taken branch per op call.
#pragma once
#include "ops/op_list.h"

namespace kiln::ops {

struct OpObserver {
    virtual ~OpObserver() = default;
    // flops: floating-point operations of the call, counting a multiply-add as 2 (2*M*N*K for a GEMM);
    // 0 for ops whose cost is memory traffic rather than arithmetic.
    virtual void begin(OpKind kind, double flops) = 0;
    virtual void end(OpKind kind) = 0;
};

// Process-wide; nullptr turns observation off. The observer must outlive the ops that report to it.
// Ops run their own threads internally but report only from the calling thread.
void set_op_observer(OpObserver* observer);
OpObserver* op_observer();

// Brackets one op call; end() runs on every exit, exceptions included.
class OpScope {
public:
    explicit OpScope(OpKind kind, double flops = 0.0) : observer_(op_observer()), kind_(kind) {
        if (observer_) observer_->begin(kind, flops);
    }
    ~OpScope() {
        if (observer_) observer_->end(kind_);
    }
    OpScope(const OpScope&) = delete;
    OpScope& operator=(const OpScope&) = delete;

private:
    OpObserver* observer_;
    OpKind kind_;
};

}  // namespace kiln::ops
