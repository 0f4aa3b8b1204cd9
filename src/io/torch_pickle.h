// A restricted reader of the pickles inside PyTorch checkpoints (.ckpt, .pt). It understands exactly the
// opcodes PyTorch's weights_only=True unpickler accepts (torch/_weights_only_unpickler.py: protocol 2's
// binary opcodes, no INST/OBJ/STACK_GLOBAL/EXT) and of the globals only what a state dict needs:
//   torch._utils._rebuild_tensor_v2, _rebuild_parameter, _rebuild_parameter_with_state,
//   torch.nn.parameter.Parameter, the storage classes torch.FloatStorage ... torch.BoolStorage (named by the
//   persistent id ('storage', class, key, location, numel)), collections.OrderedDict, _codecs.encode (bytes)
//   and builtins.set;
// plus, as inert objects that are recorded but never called or looked into, the classes AUTOMATIC1111's
// safe unpickler admits because real Stable Diffusion training checkpoints carry them outside their weights
// (pytorch_lightning's ModelCheckpoint callback state, numpy scalars and dtypes), and
// torch.nn.modules.container.ParameterDict, created empty and given only its BUILD state's "_parameters"
// (old textual-inversion .pt files keep their vectors in one; the webui admits it too).
// Nothing is ever executed: a pickle is read into a tree of values. Any other global (os.system,
// builtins.eval, ...), any opcode outside the list, a call (REDUCE/NEWOBJ) of anything but the functions
// above, or a BUILD on anything but an inert object or a dict is an InvalidModel error naming it.
// Sizes are bounded (4M values, MARK nesting, dimensions, items copied), so hostile input costs at most
// memory in proportion to its length, and ~600 MB.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace kiln {

// One value of the pickle. Containers refer to other values by index into PickleData::values (a pickle
// can make a list hold itself; indices keep that harmless).
struct PickleValue {
    enum class Kind { None, Bool, Int, BigInt, Float, String, Bytes, Tuple, List, Dict, Set, Global, Storage, Tensor, Inert };
    Kind kind = Kind::None;
    int64_t integer = 0;        // Bool, Int; Global: which allowed global (internal code)
    double number = 0;          // Float
    std::string text;           // String, Bytes, BigInt (its little-endian two's complement bytes), Global and
                                // Inert (the qualified name), Storage (its key)
    std::vector<uint32_t> items;  // Tuple, List, Set; Dict: key, value, key, value ...
    // Storage: dtype and element count. Tensor: storage value, storage offset, shape and strides (elements).
    DType dtype = DType::F32;
    uint64_t storage_numel = 0;
    uint32_t storage = 0;
    int64_t storage_offset = 0;
    std::vector<int64_t> shape, strides;
};

struct PickleData {
    std::vector<PickleValue> values;
    uint32_t root = 0;     // the value STOP returned
    uint64_t end = 0;      // the offset just past STOP, from the start of the bytes given
    const PickleValue& at(uint32_t i) const { return values[i]; }
};

// Reads one pickle from `bytes[0, size)` (it may be followed by more data: PickleData::end says where it
// stopped). `what` names the pickle in errors (e.g. "model.ckpt: archive/data.pkl").
PickleData read_torch_pickle(const uint8_t* bytes, uint64_t size, const std::string& what);

// The kind as a word for messages ("dict", "tensor", ...).
const char* pickle_kind_name(PickleValue::Kind kind);

}  // namespace kiln
