#include "ops/op_observer.h"

#include <atomic>

namespace kiln::ops {

namespace {
// Atomic so that a profiler may attach while another thread runs ops; release/acquire makes the
// observer's construction visible to the thread that calls it.
std::atomic<OpObserver*> g_observer{nullptr};
}  // namespace

void set_op_observer(OpObserver* observer) { g_observer.store(observer, std::memory_order_release); }

OpObserver* op_observer() { return g_observer.load(std::memory_order_acquire); }

}  // namespace kiln::ops
