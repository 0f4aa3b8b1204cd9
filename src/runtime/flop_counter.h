// Sums the FLOPs the ops report while it is alive, passing every report on to the observer that was
// attached before it (a running Profiler), so that counting and profiling can go together.
#pragma once
#include <cstdint>

#include "ops/op_observer.h"

namespace kiln {

class FlopCounter : public ops::OpObserver {
public:
    FlopCounter() : next_(ops::op_observer()) { ops::set_op_observer(this); }
    ~FlopCounter() override { ops::set_op_observer(next_); }
    FlopCounter(const FlopCounter&) = delete;
    FlopCounter& operator=(const FlopCounter&) = delete;

    void begin(ops::OpKind kind, double flops) override {
        flops_ += flops;
        ++calls_;
        if (next_) next_->begin(kind, flops);
    }
    void end(ops::OpKind kind) override {
        if (next_) next_->end(kind);
    }
    bool wants_device_spans() const override { return next_ && next_->wants_device_spans(); }
    void device_spans(const std::string& device, const std::vector<ops::DeviceOpSpan>& spans) override {
        if (next_) next_->device_spans(device, spans);
    }

    double flops() const { return flops_; }  // a multiply-add counts 2
    int64_t calls() const { return calls_; }

private:
    ops::OpObserver* next_;
    double flops_ = 0;
    int64_t calls_ = 0;
};

}  // namespace kiln
