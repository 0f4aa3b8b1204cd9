#include "core/backend.h"

#include <map>
#include <new>
#include <mutex>

#include "core/dtype_convert.h"
#include "core/tensor.h"
#include "kiln/error.h"

namespace kiln {

Tensor Backend::run_recorded(const std::string&, const std::vector<const Tensor*>& inputs, const RecordedFn& fn) {
    return fn(inputs);
}

void Backend::download_f32(float* dst, const void* src, DType src_type, int64_t n) {
    if (src_type == DType::F32) return download(dst, src, n * 4);
    std::vector<uint8_t> bits(size_t(dtype_storage_bytes(src_type, n)));  // block formats decode here too
    download(bits.data(), src, int64_t(bits.size()));
    decode_to_float(src_type, bits.data(), dst, size_t(n));
}

DeviceBuffer::DeviceBuffer(Backend& backend, int64_t bytes)
    : backend_(&backend),
      data_(bytes > 0 ? backend.allocate(bytes) : nullptr),
      bytes_(bytes),
      lease_(backend.allocations_are_real() ? MemoryLease(bytes, current_memory_category(),
                                                          memory_device(device_name(backend.device())))
                                            : MemoryLease()) {}

void* Backend::allocate_host(int64_t bytes) { return ::operator new(size_t(bytes), std::nothrow); }
void Backend::deallocate_host(void* p) noexcept { ::operator delete(p); }

DeviceBuffer::~DeviceBuffer() {
    if (data_) backend_->deallocate(data_);
    if (host_) backend_->deallocate_host(host_);
}

void* DeviceBuffer::data() const {
    if (offloaded_)
        fail(ErrorKind::InvalidArgument, "a weight of " + std::to_string(bytes_) + " bytes was used on " +
                                             device_name(backend_->device()) +
                                             " while offloaded to the host (restore it first: models/device_weights.h)");
    return data_;
}

void DeviceBuffer::offload() {
    if (offloaded_ || bytes_ == 0) return;
    backend_->wait_for_uploads_ahead();  // no copy ahead may still be writing memory freed here
    if (!host_ && host_vector_.empty()) {
        host_ = backend_->allocate_host(bytes_);
        if (!host_) host_vector_.resize(size_t(bytes_));
        backend_->download(host_ ? host_ : host_vector_.data(), data_, bytes_);
        host_lease_ = MemoryLease(bytes_, lease_.category());
    }
    backend_->deallocate(data_);
    data_ = nullptr;
    lease_.release();
    offloaded_ = true;
}

void DeviceBuffer::restore() {
    if (!offloaded_) return;
    const MemoryCategory category = host_lease_.category();
    data_ = backend_->allocate(bytes_);  // OutOfMemory leaves the buffer offloaded
    if (host_) backend_->upload_async(data_, host_, bytes_);
    else backend_->upload(data_, host_vector_.data(), bytes_);
    lease_ = MemoryLease(bytes_, category, memory_device(device_name(backend_->device())));
    offloaded_ = false;
}

bool DeviceBuffer::restore_ahead() {
    if (!offloaded_) return true;
    if (!host_) {  // ordinary memory: no copy can overlap anything
        restore();
        return true;
    }
    const MemoryCategory category = host_lease_.category();
    try {
        data_ = backend_->allocate(bytes_);
    } catch (const Error& e) {
        if (e.kind() != ErrorKind::OutOfMemory) throw;
        return false;
    }
    backend_->upload_ahead(data_, host_, bytes_);
    lease_ = MemoryLease(bytes_, category, memory_device(device_name(backend_->device())));
    offloaded_ = false;
    return true;
}

namespace {

struct Registry {
    std::mutex mutex;
    std::map<DeviceKind, BackendFactory> factories;
    std::map<std::pair<DeviceKind, int>, std::unique_ptr<Backend>> backends;
};

Registry& registry() {
    static Registry r;  // leaked order: backends outlive every tensor of static storage duration made after them
    return r;
}

}  // namespace

void register_backend_factory(DeviceKind kind, BackendFactory factory) {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    r.factories[kind] = std::move(factory);
}

Backend& backend_for(const Device& device) {
    require(!device.is_cpu(), ErrorKind::InvalidArgument, "the CPU has no backend object (host tensors run on src/ops)");
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    auto key = std::pair{device.kind, device.index};
    if (auto it = r.backends.find(key); it != r.backends.end()) return *it->second;
    auto f = r.factories.find(device.kind);
    require(f != r.factories.end(), ErrorKind::Unsupported,
            "device " + device_name(device) + ": this build of kiln has no " + device_kind_name(device.kind) +
                " backend (" + (device.kind == DeviceKind::Cuda ? "built without nvcc" : "built without Vulkan") + ")");
    std::unique_ptr<Backend> made = f->second.create(device.index);
    Backend& b = *made;
    r.backends.emplace(key, std::move(made));
    return b;
}

void release_backends(DeviceKind kind) {
    Registry& r = registry();
    std::map<std::pair<DeviceKind, int>, std::unique_ptr<Backend>> going;
    {
        std::lock_guard lock(r.mutex);
        for (auto it = r.backends.begin(); it != r.backends.end();)
            if (it->first.first == kind) {
                going.insert(r.backends.extract(it++));
            } else {
                ++it;
            }
    }
    going.clear();  // outside the lock: a backend's destructor may ask the registry nothing, but need not hold it
}

void synchronize_backends() {
    Registry& r = registry();
    std::vector<Backend*> made;
    {
        std::lock_guard lock(r.mutex);
        for (auto& [key, b] : r.backends) made.push_back(b.get());
    }
    for (Backend* b : made) b->synchronize();
}

std::vector<std::pair<std::string, AllocatorCounts>> backend_allocator_counts() {
    Registry& r = registry();
    std::vector<std::pair<std::string, AllocatorCounts>> counts;
    std::lock_guard lock(r.mutex);
    for (auto& [key, b] : r.backends) counts.emplace_back(device_name(b->device()), b->allocator_counts());
    return counts;
}

namespace {

// The devices of the registered kinds among `kinds` (a GPU backend may be a plugin, loaded by its list).
std::vector<DeviceDescription> list_kinds(const std::vector<DeviceKind>& kinds, std::vector<std::string>* why_none) {
    Registry& r = registry();
    std::map<DeviceKind, BackendFactory> factories;
    {
        std::lock_guard lock(r.mutex);
        factories = r.factories;
    }
    std::vector<DeviceDescription> out;
    for (DeviceKind kind : kinds) {
        auto f = factories.find(kind);
        if (f == factories.end()) {
            if (why_none && kind == DeviceKind::Cuda)
                why_none->push_back("cuda: this build has no CUDA backend (built without nvcc)");
            if (why_none && kind == DeviceKind::Vulkan)
                why_none->push_back("vulkan: this build has no Vulkan backend (built without libvulkan-dev and glslc)");
            continue;
        }
        std::string why;
        for (DeviceDescription& d : f->second.list(&why)) out.push_back(std::move(d));
        if (!why.empty() && why_none) why_none->push_back(why);
    }
    return out;
}

}  // namespace

std::vector<DeviceDescription> list_devices(std::vector<std::string>* why_none) {
    std::vector<DeviceDescription> out{{Device{}, "CPU", "host memory, OpenBLAS + OpenMP", {}}};
    for (DeviceDescription& d : list_kinds({DeviceKind::Cuda, DeviceKind::Vulkan}, why_none))
        out.push_back(std::move(d));
    return out;
}

Device resolve_device(const std::string& text) {
    if (text == "auto") {
        for (const DeviceDescription& d : list_devices())
            if (!d.device.is_cpu() && !d.emulated) return d.device;
        return Device{};
    }
    Device d = parse_device(text);
    if (d.is_cpu()) return d;
    std::vector<std::string> why;  // of this kind only: asking for a CUDA device loads no Vulkan plugin
    for (const DeviceDescription& desc : list_kinds({d.kind}, &why))
        if (desc.device == d) return d;
    std::string reason;
    for (const std::string& w : why) reason += (reason.empty() ? "" : "; ") + w;
    fail(ErrorKind::Unsupported,
         "device " + text + " is not available" + (reason.empty() ? std::string() : " (" + reason + ")"));
}

}  // namespace kiln
