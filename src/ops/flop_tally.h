// For backends that record a call once and replay it (CUDA graphs, Vulkan command buffers): FlopTally adds
// up, per op kind, the FLOPs the ops report while a call is recorded (passing every report on to the
// observer that was there before), and report_flops() reports them again at each replay, when no op runs
// on the host, so that kiln bench and --profile count a replayed call's work.
#pragma once
#include <array>

#include "ops/op_list.h"
#include "ops/op_observer.h"

namespace kiln::ops {

class FlopTally : public OpObserver {
public:
    FlopTally() : next_(op_observer()) { set_op_observer(this); }
    ~FlopTally() override { set_op_observer(next_); }
    FlopTally(const FlopTally&) = delete;
    FlopTally& operator=(const FlopTally&) = delete;
    void begin(OpKind kind, double flops) override {
        flops_[static_cast<int>(kind)] += flops;
        if (next_) next_->begin(kind, flops);
    }
    void end(OpKind kind) override {
        if (next_) next_->end(kind);
    }
    bool wants_device_spans() const override { return next_ && next_->wants_device_spans(); }
    void device_spans(const std::string& device, const std::vector<DeviceOpSpan>& spans) override {
        if (next_) next_->device_spans(device, spans);
    }
    const std::array<double, kOpCount>& flops() const { return flops_; }

private:
    OpObserver* next_;
    std::array<double, kOpCount> flops_{};
};

inline void report_flops(const std::array<double, kOpCount>& flops) {
    if (OpObserver* o = op_observer())
        for (int k = 0; k < kOpCount; ++k)
            if (flops[k] > 0) {
                o->begin(static_cast<OpKind>(k), flops[k]);
                o->end(static_cast<OpKind>(k));
            }
}

}  // namespace kiln::ops
