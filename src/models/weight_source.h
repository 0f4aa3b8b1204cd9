// Where a model component gets its weights: by the tensor names diffusers uses (the internal names),
// whatever the file layout on disk. A diffusers folder is read as is; a single-file checkpoint in the
// original layout is read through a rename table built from the names the file holds (see *_names.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"
#include "models/device_weights.h"
#include "models/weight_pages.h"

namespace kiln {

// How one internal tensor is made from one tensor in the file.
struct WeightMapping {
    enum class Op {
        Copy,       // same values and shape
        Squeeze,    // drop size-1 dims: a 1x1 conv stored where diffusers has a linear ([C,C,1,1] -> [C,C])
        Transpose,  // 2-d transpose: a projection stored as x @ P where diffusers keeps P^T
        RowSlice,   // rows [part*n/parts, (part+1)*n/parts): one of q,k,v from a fused in_proj
    };
    std::string file_name;
    Op op = Op::Copy;
    int part = 0, parts = 1;
};

class WeightSource {
public:
    virtual ~WeightSource() = default;
    virtual bool has(const std::string& name) const = 0;
    // float32; missing, or stored as integers or booleans (not weights) -> InvalidModel naming it
    virtual Tensor load(const std::string& name) const = 0;
    virtual std::vector<std::string> names() const = 0;      // internal names available
    virtual std::string describe() const = 0;                // the file, for messages
    // Whether the views this source hands out (Tensor::view) are pages of a mapped file, which WeightPages
    // may drop from the resident set because the kernel can read them again (not so for views of memory
    // the process wrote, which dropping would zero).
    virtual bool views_are_file_pages() const { return false; }
    // What WeightReader calls when it knows the shape it expects. Sources that make tensors instead of
    // reading them (synthetic_weights.h, for benchmarks) use the shape; the default reads load(name),
    // so file sources behave exactly as before.
    // How to name a tensor in a message: as the user's file names it.
    virtual std::string display_name(const std::string& name) const { return "'" + name + "'"; }
    virtual Tensor load_expecting(const std::string& name, const Shape& expected) const {
        (void)expected;
        return load(name);
    }
    // A weight matrix of linear or conv2d, which ops take in F16/BF16 too: the file's precision where
    // that is 16-bit (half the memory of float32), else as load_expecting. `expected` may be null.
    virtual Tensor load_matrix(const std::string& name, const Shape* expected) const {
        return expected ? load_expecting(name, *expected) : load(name);
    }
    // As load_matrix, for a matrix the caller copies at once (stacked with others): never a view of a
    // mapped file, whose pages would stay resident beside the copy with nothing reading them again.
    virtual Tensor load_matrix_copied(const std::string& name, const Shape* expected) const {
        return load_matrix(name, expected);
    }

    // The precision WeightReader::get_matrix hands matrices out in: unset keeps load_matrix's (the
    // file's); F32, F16 or BF16 converts at load (the --weights option); a block format (Q8_0, Q4_0,
    // Q4_1) quantizes the matrices models/quant_policy.h picks and keeps the others as stored. Other
    // tensors are float32.
    std::optional<DType> weights_dtype;
    // Set when the component runs on a GPU: every tensor WeightReader hands out (but the host ones, below)
    // is moved there in device_dtype, the precision the backend computes in.
    Backend* device = nullptr;
    DType device_dtype = DType::F16;
    // Each weight leaves the device as soon as it is there (DeviceBuffer::offload), so that loading holds one
    // weight of device memory at a time: a memory budget (--vram) brings them back by stage or block.
    bool offload_weights = false;

protected:
    // Whether a matrix the file stores as `stored` is handed out as stored, on the host. Then file sources
    // hand out a view of the mapped file (io/mapped_tensor.h) instead of a copy where the tensor allows.
    bool keeps_stored_on_host(DType stored) const { return !device && (!weights_dtype || *weights_dtype == stored); }
};

// Every tensor of a safetensors file, by its own name (diffusers folders). Matrices are views of the
// mapped file where keeps_stored_on_host allows it, so the model keeps the file mapped.
class FileSource : public WeightSource {
public:
    explicit FileSource(std::shared_ptr<const SafetensorsFile> file);
    bool has(const std::string& name) const override;
    Tensor load(const std::string& name) const override;
    Tensor load_matrix(const std::string& name, const Shape* expected) const override;
    Tensor load_matrix_copied(const std::string& name, const Shape* expected) const override;
    std::vector<std::string> names() const override;
    std::string describe() const override;
    bool views_are_file_pages() const override { return true; }

private:
    Tensor matrix(const std::string& name, bool in_place) const;

    std::shared_ptr<const SafetensorsFile> file_;
};

// Internal names mapped onto tensors of a single-file checkpoint. As FileSource, matrices are views of
// the mapped file where the mapping needs no arithmetic (Copy, Squeeze, RowSlice).
class MappedSource : public WeightSource {
public:
    // `file_name_for` names, as the file would, a tensor the table lacks (for messages).
    MappedSource(std::shared_ptr<const SafetensorsFile> file, std::map<std::string, WeightMapping> table,
                 std::string component, std::function<std::string(const std::string&)> file_name_for = nullptr);
    bool has(const std::string& name) const override;
    Tensor load(const std::string& name) const override;
    Tensor load_matrix(const std::string& name, const Shape* expected) const override;
    Tensor load_matrix_copied(const std::string& name, const Shape* expected) const override;
    std::vector<std::string> names() const override;
    std::string describe() const override;
    std::string display_name(const std::string& name) const override;
    bool views_are_file_pages() const override { return true; }

private:
    Tensor load_mapped(const std::string& name, bool stored_precision, bool in_place) const;
    std::optional<Tensor> view(const WeightMapping& m) const;

    std::shared_ptr<const SafetensorsFile> file_;
    std::map<std::string, WeightMapping> table_;
    std::string component_;
    std::function<std::string(const std::string&)> file_name_for_;
};

// Reads a component's weights with shape checks and remembers what was read, so that a loader can
// name every missing tensor and every tensor it did not expect.
class WeightReader {
public:
    explicit WeightReader(const WeightSource& source) : source_(source) {}
    Tensor get(const std::string& name, const Shape& expected);
    Tensor get(const std::string& name);  // shape checked by the caller
    // Weights of linear and conv2d, and embedding tables read by rows (Tensor::row_to_f32): in the
    // source's weights_dtype, or as the file stores them.
    Tensor get_matrix(const std::string& name, const Shape& expected);
    Tensor get_matrix(const std::string& name);  // shape checked by the caller
    // Matrices of shape `each` stacked along their rows, as get_matrix would give each: [count * rows, cols]
    // (attention's q, k and v projections made by one product).
    Tensor get_matrix_stack(const std::vector<std::string>& names, const Shape& each);
    // Vectors of `each` values, as get would give each, one after the other: [count * each] (the biases of
    // stacked matrices).
    Tensor get_vector_stack(const std::vector<std::string>& names, int64_t each);
    // As get / get_matrix, but kept on the host whatever the source's device: tables the model reads by rows
    // on the host (CLIP's token and position embeddings).
    Tensor get_host(const std::string& name, const Shape& expected);
    Tensor get_matrix_host(const std::string& name, const Shape& expected);
    bool has(const std::string& name) const { return source_.has(name); }
    // A tensor as messages name it: as the user's file names it, and in which file.
    std::string where(const std::string& name) const { return source_.display_name(name) + " in " + source_.describe(); }
    int64_t parameters_read() const { return parameters_; }
    // The file pages of the views handed out so far (when the source's views are file pages), for the
    // component to keep: it drops them when a memory budget asks (weight_pages.h).
    WeightPages take_pages() { return std::move(pages_); }
    // The device storage of the weights handed out so far (when the source has a device), likewise.
    DeviceWeights take_device_weights() { return std::move(device_weights_); }
    // Throws InvalidModel listing the tensors of the source that were never read (ignoring those
    // for which `ignore` returns true). Call after loading the whole component.
    void check_all_used(const std::function<bool(const std::string&)>& ignore = nullptr) const;

private:
    Tensor read(const std::string& name, const Shape* expected, bool matrix, bool copied = false);
    Tensor stack(const std::vector<std::string>& names, const Shape& each, bool matrix);
    Tensor place(Tensor t, std::vector<std::string> names);

    const WeightSource& source_;
    std::set<std::string> used_;
    int64_t parameters_ = 0;
    WeightPages pages_;
    DeviceWeights device_weights_;
};

}  // namespace kiln
