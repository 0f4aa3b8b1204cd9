// CallRecorder (ops/call_recorder.h) on a fake device whose memory is the host's and whose stream is a list
// of host functions: run at once, or appended to a recording and run again at each replay, as a CUDA graph or
// a Vulkan command buffer would. What the GPU backends add (capture, submission) is tested on their devices
// (tests/gpu/device_ops_test.cpp, block_weights_test.cpp).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "ops/call_recorder.h"
#include "ops/op_observer.h"

using namespace kiln;

namespace {

class FakeDevice final : public Backend, public ops::RecordingDevice {
public:
    using Kernel = std::function<void()>;

    // Backend: host memory, every copy a kernel on the stream.
    Device device() const override { return {DeviceKind::Cuda, 77}; }
    DeviceDescription describe() const override { return {device(), "fake", "", {}}; }
    DeviceMemoryInfo memory_info() const override { return {}; }
    int64_t reserved_bytes() const override { return 0; }
    void* allocate(int64_t bytes) override {
        void* p = ::operator new(size_t(bytes));
        pool_of_[p] = pool_;
        return p;
    }
    void deallocate(void* p) noexcept override {
        pool_of_.erase(p);
        ::operator delete(p);
    }
    void upload(void* dst, const void* src, int64_t bytes) override {
        require(!capturing_, ErrorKind::Unsupported, "fake: an upload inside a recorded call");
        std::memcpy(dst, src, size_t(bytes));
    }
    void download(void* dst, const void* src, int64_t bytes) override {
        require(!capturing_, ErrorKind::Unsupported, "fake: a download inside a recorded call");
        std::memcpy(dst, src, size_t(bytes));
    }
    void copy(void* dst, const void* src, int64_t bytes) override {
        launch([=] { std::memcpy(dst, src, size_t(bytes)); });
    }
    void convert(const void*, DType, void*, DType, int64_t) override { fail(ErrorKind::Unsupported, "fake: convert"); }
    void synchronize() override {}
    const ops::DeviceOps& ops() const override { fail(ErrorKind::Unsupported, "fake: no ops"); }

    // The stream: a kernel runs now, or joins the recording being made.
    void launch(Kernel k) {
        if (capturing_)
            recording_->push_back(std::move(k));
        else
            k();
    }

    // RecordingDevice.
    class Work final : public ops::RecordedWork {
    public:
        Work(FakeDevice& d, std::shared_ptr<std::vector<Kernel>> kernels) : device_(d), kernels_(std::move(kernels)) {}
        ~Work() override {
            ++device_.destroyed;
            device_.destroyed_busy += !device_.idle_;  // while the device might still run it
        }
        void replay() override {
            device_.idle_ = false;
            ++device_.replays;
            for (const Kernel& k : *kernels_) k();
        }

    private:
        FakeDevice& device_;
        std::shared_ptr<std::vector<Kernel>> kernels_;
    };
    bool recording_enabled() const override { return enabled; }
    int new_pool() override {
        ++pools_made;
        return pools_made;
    }
    void use_pool(int pool) override { pool_ = pool; }
    void release_pool(int pool) noexcept override { released.insert(pool); }
    void begin_recording() override {
        if (fail_begin) fail(ErrorKind::Unsupported, "fake: cannot record");
        capturing_ = true;
        recording_ = std::make_shared<std::vector<Kernel>>();
    }
    std::unique_ptr<ops::RecordedWork> end_recording() override {
        capturing_ = false;
        return std::make_unique<Work>(*this, std::move(recording_));
    }
    void abort_recording() noexcept override {
        capturing_ = false;
        recording_.reset();
        ++aborted;
    }
    void wait_idle() override {
        idle_ = true;
        ++waits;
    }

    int pool_of(const void* p) const { return pool_of_.at(p); }
    int current_pool() const { return pool_; }

    bool enabled = true;
    bool fail_begin = false;
    int pools_made = 0, destroyed = 0, destroyed_busy = 0, aborted = 0, waits = 0, replays = 0;
    std::set<int> released;

private:
    bool capturing_ = false;
    bool idle_ = true;
    int pool_ = 0;
    std::shared_ptr<std::vector<Kernel>> recording_;
    std::map<const void*, int> pool_of_;
};

Tensor on(FakeDevice& d, std::vector<float> values) {
    const int64_t n = int64_t(values.size());
    return Tensor({n}, std::move(values)).to_device(d, DType::F32);
}

// y = 3 x, as one kernel, reporting 10 FLOPs (a Linear's, for the tally).
struct Triple {
    FakeDevice& device;
    int calls = 0;
    Tensor operator()(const std::vector<const Tensor*>& in) {
        ++calls;
        ops::OpScope scope(ops::OpKind::Linear, 10.0);
        Tensor y = Tensor::empty_on(device, in[0]->shape(), DType::F32);
        const float* x = static_cast<const float*>(in[0]->device_data());
        float* out = static_cast<float*>(y.device_data());
        const int64_t n = in[0]->numel();
        device.launch([=] {
            for (int64_t i = 0; i < n; ++i) out[i] = 3.0f * x[i];
        });
        return y;
    }
};

struct FlopCounter : ops::OpObserver {
    double flops = 0;
    void begin(ops::OpKind, double f) override { flops += f; }
    void end(ops::OpKind) override {}
};

struct ObserverScope {
    explicit ObserverScope(ops::OpObserver* o) : previous(ops::op_observer()) { ops::set_op_observer(o); }
    ~ObserverScope() { ops::set_op_observer(previous); }
    ops::OpObserver* previous;
};

void expect_tripled(const Tensor& y, const std::vector<float>& x, int call) {
    const Tensor h = y.to_host();
    ASSERT_EQ(h.numel(), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(h[int64_t(i)], 3.0f * x[i]) << "call " << call << ", value " << i;
}

}  // namespace

// The first call runs eagerly, the second records (and runs the recording), later ones replay it with their own
// inputs without calling the function; every call's FLOPs reach the observer once.
TEST(CallRecorder, FirstEagerSecondRecordsThenReplays) {
    FakeDevice d;
    ops::CallRecorder recorder(d, 8);
    Triple triple{d};
    FlopCounter counter;
    ObserverScope observe(&counter);
    for (int call = 1; call <= 5; ++call) {
        const std::vector<float> x = {float(call), -0.5f * float(call), 7.0f};
        const Tensor xd = on(d, x);
        const Tensor y = recorder.run("k", {&xd}, std::ref(triple));
        expect_tripled(y, x, call);
        EXPECT_EQ(triple.calls, std::min(call, 2)) << "call " << call;
        EXPECT_EQ(d.replays, std::max(call - 1, 0)) << "call " << call;
        EXPECT_EQ(counter.flops, 10.0 * call) << "call " << call;
        EXPECT_EQ(d.pool_of(y.device_data()), 0) << "the result must be a copy outside the recording's pool";
    }
    EXPECT_EQ(recorder.recordings(), 1);
    EXPECT_EQ(d.pools_made, 1);
    EXPECT_EQ(d.current_pool(), 0);
}

// A recording that fails (here an upload inside the call, a host round trip) is dropped with its pool, the
// call runs eagerly instead, and the key stays eager: no second attempt.
TEST(CallRecorder, FailedRecordingFallsBackAndStaysEager) {
    FakeDevice d;
    ops::CallRecorder recorder(d, 8);
    int calls = 0;
    const Backend::RecordedFn with_upload = [&](const std::vector<const Tensor*>& in) {
        ++calls;
        const Tensor one = on(d, {1.0f, 1.0f});
        Tensor y = Tensor::empty_on(d, in[0]->shape(), DType::F32);
        const float* x = static_cast<const float*>(in[0]->device_data());
        const float* b = static_cast<const float*>(one.device_data());
        float* out = static_cast<float*>(y.device_data());
        d.launch([=] {
            for (int i = 0; i < 2; ++i) out[i] = x[i] + b[i];
        });
        return y;
    };
    for (int call = 1; call <= 4; ++call) {
        const Tensor xd = on(d, {float(call), 2.0f});
        const Tensor y = recorder.run("upload", {&xd}, with_upload).to_host();
        EXPECT_EQ(y[0], float(call) + 1.0f);
        EXPECT_EQ(y[1], 3.0f);
    }
    EXPECT_EQ(calls, 5) << "four eager calls and the attempt to record the second";
    EXPECT_EQ(d.pools_made, 1);
    EXPECT_EQ(d.released, std::set<int>{1});
    EXPECT_EQ(d.aborted, 1);
    EXPECT_EQ(d.current_pool(), 0);
    EXPECT_EQ(recorder.recordings(), 0);

    // The device refusing to record at all is the same.
    FakeDevice e;
    e.fail_begin = true;
    ops::CallRecorder other(e, 8);
    Triple triple{e};
    for (int call = 1; call <= 3; ++call) {
        const std::vector<float> x = {float(call)};
        const Tensor xd = on(e, x);
        expect_tripled(other.run("k", {&xd}, std::ref(triple)), x, call);
    }
    EXPECT_EQ(triple.calls, 3);
    EXPECT_EQ(e.released, std::set<int>{1});
}

// While the device does not record (Vulkan while a profiler wants GPU time per op), calls run eagerly and
// a recording made before is kept for later.
TEST(CallRecorder, DisabledRunsEagerly) {
    FakeDevice d;
    ops::CallRecorder recorder(d, 8);
    Triple triple{d};
    const Tensor xd = on(d, {1.0f, 2.0f});
    for (int call = 1; call <= 2; ++call) recorder.run("k", {&xd}, std::ref(triple));
    d.enabled = false;
    expect_tripled(recorder.run("k", {&xd}, std::ref(triple)), {1.0f, 2.0f}, 3);
    EXPECT_EQ(triple.calls, 3);
    EXPECT_EQ(recorder.recordings(), 1);
    d.enabled = true;
    expect_tripled(recorder.run("k", {&xd}, std::ref(triple)), {1.0f, 2.0f}, 4);
    EXPECT_EQ(triple.calls, 3) << "the recording should have been replayed";
}

// A replay's inputs must match the recording's: shape, dtype and count, each an InvalidArgument naming the key.
TEST(CallRecorder, ReplayChecksInputs) {
    FakeDevice d;
    ops::CallRecorder recorder(d, 8);
    Triple triple{d};
    const Tensor x = on(d, {1.0f, 2.0f});
    for (int call = 1; call <= 2; ++call) recorder.run("unet 2", {&x}, std::ref(triple));
    const Tensor longer = on(d, {1.0f, 2.0f, 3.0f});
    const Tensor reshaped = x.reshaped({1, 2});
    const std::vector<std::pair<std::vector<const Tensor*>, std::string>> cases = {
        {{&longer}, "recorded call 'unet 2': input 0 changed shape or dtype"},
        {{&reshaped}, "recorded call 'unet 2': input 0 changed shape or dtype"},
        {{&x, &x}, "recorded call 'unet 2': 2 inputs, recorded with 1"},
    };
    for (const auto& [inputs, message] : cases) {
        try {
            recorder.run("unet 2", inputs, std::ref(triple));
            ADD_FAILURE() << "no error for: " << message;
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
            EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
        }
    }
    EXPECT_EQ(triple.calls, 2);
    expect_tripled(recorder.run("unet 2", {&x}, std::ref(triple)), {1.0f, 2.0f}, 6);  // still replays
}

// Forgetting by key prefix waits for the device once, then releases those recordings' pools; their keys run
// eagerly again, then record again. Other keys keep their recordings.
TEST(CallRecorder, ForgetsByPrefix) {
    FakeDevice d;
    ops::CallRecorder recorder(d, 8);
    Triple triple{d};
    const Tensor x = on(d, {4.0f});
    for (const char* key : {"unet a", "unet b", "clip a"})
        for (int call = 1; call <= 2; ++call) recorder.run(key, {&x}, std::ref(triple));
    ASSERT_EQ(recorder.recordings(), 3);
    const int waits = d.waits;
    recorder.forget("unet ");
    EXPECT_EQ(d.waits, waits + 1);
    EXPECT_EQ(d.destroyed, 2);
    EXPECT_EQ(d.destroyed_busy, 0);
    EXPECT_EQ(d.released, (std::set<int>{1, 2}));  // the unet keys' pools, made first
    EXPECT_EQ(recorder.recordings(), 1);
    recorder.forget("nothing");
    EXPECT_EQ(d.waits, waits + 1) << "no wait where nothing is forgotten";

    const int before = triple.calls;
    recorder.run("clip a", {&x}, std::ref(triple));
    EXPECT_EQ(triple.calls, before) << "clip a should still replay";
    recorder.run("unet a", {&x}, std::ref(triple));
    recorder.run("unet a", {&x}, std::ref(triple));
    EXPECT_EQ(triple.calls, before + 2) << "unet a: eager, then recorded";
    expect_tripled(recorder.run("unet a", {&x}, std::ref(triple)), {4.0f}, 3);
    EXPECT_EQ(triple.calls, before + 2) << "unet a should replay its new recording";
}

// Past the bound, making a recording evicts the least recently replayed one (after a wait for the device);
// an evicted key records again at its next call, without another eager call.
TEST(CallRecorder, EvictsTheLeastRecentlyUsed) {
    FakeDevice d;
    ops::CallRecorder recorder(d, 2);
    Triple triple{d};
    const Tensor x = on(d, {1.0f});
    auto run = [&](const char* key) { return recorder.run(key, {&x}, std::ref(triple)); };
    for (const char* key : {"a", "a", "b", "b", "a"}) run(key);  // a: pool 1, b: pool 2, then b the least recent
    EXPECT_EQ(recorder.evictions(), 0);
    const int waits = d.waits;
    run("c");
    run("c");  // pool 3: evicts b
    EXPECT_EQ(recorder.evictions(), 1);
    EXPECT_EQ(d.waits, waits + 1);
    EXPECT_EQ(d.destroyed_busy, 0);
    EXPECT_EQ(d.released, std::set<int>{2});
    EXPECT_EQ(recorder.recordings(), 2);

    int calls = triple.calls;
    run("a");
    EXPECT_EQ(triple.calls, calls) << "a should still replay";
    run("c");
    EXPECT_EQ(triple.calls, calls) << "c should still replay";
    expect_tripled(run("b"), {1.0f}, 1);  // records again at once (pool 4), evicting a
    EXPECT_EQ(triple.calls, calls + 1);
    EXPECT_EQ(d.released, (std::set<int>{1, 2}));
    calls = triple.calls;
    run("b");
    run("c");
    EXPECT_EQ(triple.calls, calls) << "b and c should replay";
    EXPECT_EQ(recorder.evictions(), 2);
    EXPECT_EQ(d.pools_made, 4);
}

// A failure that says nothing about the call (out of host memory, say) is passed on; the pool goes, and the
// next call tries to record again.
TEST(CallRecorder, OtherExceptionsLeaveTheKeyRecordable) {
    FakeDevice d;
    ops::CallRecorder recorder(d, 8);
    Triple triple{d};
    bool throw_once = false;
    const Backend::RecordedFn fn = [&](const std::vector<const Tensor*>& in) {
        if (throw_once) {
            throw_once = false;
            throw std::bad_alloc();
        }
        return triple(in);
    };
    const Tensor x = on(d, {2.0f});
    recorder.run("k", {&x}, fn);
    throw_once = true;
    EXPECT_THROW(recorder.run("k", {&x}, fn), std::bad_alloc);
    EXPECT_EQ(d.released, std::set<int>{1});
    EXPECT_EQ(d.current_pool(), 0);
    expect_tripled(recorder.run("k", {&x}, fn), {2.0f}, 3);
    EXPECT_EQ(recorder.recordings(), 1);
    EXPECT_EQ(triple.calls, 2);
}

TEST(CallRecorder, MaxRecordingsFromEnvironment) {
    EXPECT_EQ(ops::max_recordings_from_env(nullptr), ops::kDefaultMaxRecordings);
    EXPECT_EQ(ops::max_recordings_from_env(""), ops::kDefaultMaxRecordings);
    EXPECT_EQ(ops::max_recordings_from_env("1"), 1);
    EXPECT_EQ(ops::max_recordings_from_env("32"), 32);
    for (const char* bad : {"0", "-1", "+3", " 3", "3x", "x", "1.5", "99999999999999999999"}) {
        try {
            ops::max_recordings_from_env(bad);
            ADD_FAILURE() << "accepted KILN_RECORDINGS_MAX=" << bad;
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
            EXPECT_NE(std::string(e.what()).find(std::string("KILN_RECORDINGS_MAX=") + bad), std::string::npos)
                << e.what();
        }
    }
    FakeDevice d;
    EXPECT_THROW(ops::CallRecorder(d, 0), Error);
}
