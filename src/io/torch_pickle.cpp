#include "io/torch_pickle.h"

#include <cstring>
#include <map>
#include <unordered_map>

#include "io/safetensors_header.h"  // quote_name, one_line
#include "kiln/error.h"

namespace kiln {

namespace {

// Bounds that no real checkpoint comes near (SDXL's state dict has ~2,500 tensors, each ~10 values).
constexpr size_t kMaxMarkDepth = 4096;
constexpr size_t kMaxDims = 16;
constexpr size_t kMaxLineBytes = 256;  // a GLOBAL's module or name
// Values of ~150 bytes each: 4M of them bound a hostile pickle's memory to ~600 MB (SDXL's has ~70K).
constexpr size_t kMaxValues = size_t(1) << 22;

// The globals kiln accepts, by the code PickleValue::integer holds for them.
enum GlobalCode : int64_t {
    kOrderedDict,
    kRebuildTensorV2,
    kRebuildParameter,
    kRebuildParameterWithState,
    kParameter,
    kStorageClass,
    kCodecsEncode,
    kSet,
    kInertClass,
    kParameterDict,
};

struct AllowedGlobal {
    GlobalCode code;
    DType dtype = DType::F32;  // storage classes
};

const std::map<std::string, AllowedGlobal>& allowed_globals() {
    static const std::map<std::string, AllowedGlobal> table = {
        {"collections.OrderedDict", {kOrderedDict}},
        {"torch._utils._rebuild_tensor_v2", {kRebuildTensorV2}},
        {"torch._utils._rebuild_parameter", {kRebuildParameter}},
        {"torch._utils._rebuild_parameter_with_state", {kRebuildParameterWithState}},
        {"torch.nn.parameter.Parameter", {kParameter}},
        {"torch.DoubleStorage", {kStorageClass, DType::F64}},
        {"torch.FloatStorage", {kStorageClass, DType::F32}},
        {"torch.HalfStorage", {kStorageClass, DType::F16}},
        {"torch.BFloat16Storage", {kStorageClass, DType::BF16}},
        {"torch.LongStorage", {kStorageClass, DType::I64}},
        {"torch.IntStorage", {kStorageClass, DType::I32}},
        {"torch.ShortStorage", {kStorageClass, DType::I16}},
        {"torch.CharStorage", {kStorageClass, DType::I8}},
        {"torch.ByteStorage", {kStorageClass, DType::U8}},
        {"torch.BoolStorage", {kStorageClass, DType::BOOL}},
        {"_codecs.encode", {kCodecsEncode}},
        {"builtins.set", {kSet}},
        // Inert: what AUTOMATIC1111's modules/safe.py admits for real training checkpoints.
        {"pytorch_lightning.callbacks.model_checkpoint.ModelCheckpoint", {kInertClass}},
        {"numpy.core.multiarray.scalar", {kInertClass}},
        {"numpy._core.multiarray.scalar", {kInertClass}},  // numpy 2's name
        {"numpy.core.multiarray._reconstruct", {kInertClass}},
        {"numpy.dtype", {kInertClass}},
        {"numpy.ndarray", {kInertClass}},
        // Old textual-inversion .pt files hold their vectors in a ParameterDict: its BUILD state's _parameters are kept.
        {"torch.nn.modules.container.ParameterDict", {kParameterDict}},
    };
    return table;
}

// Names of the opcodes a hostile or newer pickle is likely to use, for the error message.
const char* opcode_name(uint8_t op) {
    switch (op) {
        case 'i': return "INST";
        case 'o': return "OBJ";
        case 0x93: return "STACK_GLOBAL";
        case 0x92: return "NEWOBJ_EX";
        case 0x82: case 0x83: case 0x84: return "EXT";
        case 0x8c: return "SHORT_BINUNICODE";
        case 0x94: return "MEMOIZE";
        case 0x95: return "FRAME";
        case '0': return "POP";
        case 'S': return "STRING";
        default: return "an opcode";
    }
}

std::string hex_byte(uint8_t b) {
    static const char* digits = "0123456789abcdef";
    return std::string("0x") + digits[b >> 4] + digits[b & 15];
}

class Reader {
public:
    Reader(const uint8_t* bytes, uint64_t size, const std::string& what) : p_(bytes), size_(size), what_(what) {}

    PickleData run() {
        while (true) {
            const uint64_t at = pos_;
            const uint8_t op = byte();
            if (op == '.') {  // STOP
                out_.root = pop();
                out_.end = pos_;
                return std::move(out_);
            }
            step(op, at);
        }
    }

private:
    [[noreturn]] void bad(const std::string& message) const { fail(ErrorKind::InvalidModel, what_ + ": " + message); }

    const uint8_t* take(uint64_t n) {
        if (n > size_ - pos_) bad("the pickle ends early (at byte " + std::to_string(size_) + ")");
        const uint8_t* at = p_ + pos_;
        pos_ += n;
        return at;
    }
    uint8_t byte() { return *take(1); }
    uint64_t le(int n) {
        const uint8_t* b = take(n);
        uint64_t v = 0;
        for (int i = n - 1; i >= 0; --i) v = (v << 8) | b[i];
        return v;
    }
    std::string line() {
        const uint64_t start = pos_;
        while (true) {
            if (pos_ - start > kMaxLineBytes) bad("a GLOBAL's name is longer than " + std::to_string(kMaxLineBytes) + " bytes");
            if (byte() == '\n') break;
        }
        return std::string(reinterpret_cast<const char*>(p_ + start), pos_ - start - 1);
    }

    uint32_t add(PickleValue v) {
        if (out_.values.size() >= kMaxValues) bad("more than " + std::to_string(kMaxValues) + " values");
        out_.values.push_back(std::move(v));
        return static_cast<uint32_t>(out_.values.size() - 1);
    }
    uint32_t add(PickleValue::Kind kind) {
        PickleValue v;
        v.kind = kind;
        return add(std::move(v));
    }
    PickleValue& val(uint32_t i) { return out_.values[i]; }

    size_t base() const { return marks_.empty() ? 0 : marks_.back(); }
    void need(size_t n, const char* op) {
        if (stack_.size() < base() + n) bad(std::string(op) + " needs " + std::to_string(n) + " values on the stack");
    }
    uint32_t pop() {
        need(1, "an opcode");
        const uint32_t v = stack_.back();
        stack_.pop_back();
        return v;
    }
    uint32_t& top(const char* op) {
        need(1, op);
        return stack_.back();
    }
    std::vector<uint32_t> pop_mark(const char* op) {
        if (marks_.empty()) bad(std::string(op) + " without a MARK");
        std::vector<uint32_t> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
        stack_.resize(marks_.back());
        marks_.pop_back();
        return items;
    }
    // Items copied into a new container (set(), OrderedDict(pairs)) count against a budget proportional to
    // the pickle's length, so that copying one long list many times cannot take quadratic memory.
    void charge_copies(size_t n) {
        copied_ += n;
        if (copied_ > 16 * size_ + 1024) bad("the pickle copies more container items than its length allows");
    }

    void push_int(int64_t v) {
        PickleValue x;
        x.kind = PickleValue::Kind::Int;
        x.integer = v;
        stack_.push_back(add(std::move(x)));
    }
    void push_string(std::string text, PickleValue::Kind kind = PickleValue::Kind::String) {
        PickleValue x;
        x.kind = kind;
        x.text = std::move(text);
        stack_.push_back(add(std::move(x)));
    }

    void step(uint8_t op, uint64_t at) {
        using K = PickleValue::Kind;
        switch (op) {
            case 0x80: {  // PROTO
                const uint8_t proto = byte();
                if (proto > 5) bad("pickle protocol " + std::to_string(proto) + " is unknown");
                return;
            }
            case 'c': return global();
            case 0x81: return newobj();
            case 'R': return reduce();
            case 'b': return build();
            case 'a': {  // APPEND
                const uint32_t item = pop();
                const uint32_t list = top("APPEND");
                if (val(list).kind != K::List) bad(std::string("APPEND to a ") + pickle_kind_name(val(list).kind));
                val(list).items.push_back(item);
                return;
            }
            case 'e': {  // APPENDS
                std::vector<uint32_t> items = pop_mark("APPENDS");
                const uint32_t list = top("APPENDS");
                if (val(list).kind != K::List) bad(std::string("APPENDS to a ") + pickle_kind_name(val(list).kind));
                val(list).items.insert(val(list).items.end(), items.begin(), items.end());
                return;
            }
            case 's': {  // SETITEM
                const uint32_t v = pop(), k = pop();
                const uint32_t dict = top("SETITEM");
                if (val(dict).kind != K::Dict) bad(std::string("SETITEM on a ") + pickle_kind_name(val(dict).kind));
                val(dict).items.push_back(k);
                val(dict).items.push_back(v);
                return;
            }
            case 'u': {  // SETITEMS
                std::vector<uint32_t> items = pop_mark("SETITEMS");
                if (items.size() % 2) bad("SETITEMS with an odd number of values");
                const uint32_t dict = top("SETITEMS");
                if (val(dict).kind != K::Dict) bad(std::string("SETITEMS on a ") + pickle_kind_name(val(dict).kind));
                val(dict).items.insert(val(dict).items.end(), items.begin(), items.end());
                return;
            }
            case '(':  // MARK
                if (marks_.size() >= kMaxMarkDepth) bad("MARKs nested deeper than " + std::to_string(kMaxMarkDepth));
                marks_.push_back(stack_.size());
                return;
            case 't': {  // TUPLE
                PickleValue t;
                t.kind = K::Tuple;
                t.items = pop_mark("TUPLE");
                stack_.push_back(add(std::move(t)));
                return;
            }
            case 0x85: case 0x86: case 0x87: {  // TUPLE1..3
                const size_t n = op - 0x84;
                need(n, "TUPLEn");
                PickleValue t;
                t.kind = K::Tuple;
                t.items.assign(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
                stack_.resize(stack_.size() - n);
                stack_.push_back(add(std::move(t)));
                return;
            }
            case 'N': stack_.push_back(add(K::None)); return;
            case 0x88: case 0x89: {  // NEWTRUE, NEWFALSE
                PickleValue b;
                b.kind = K::Bool;
                b.integer = op == 0x88;
                stack_.push_back(add(std::move(b)));
                return;
            }
            case ')': stack_.push_back(add(K::Tuple)); return;
            case ']': stack_.push_back(add(K::List)); return;
            case '}': stack_.push_back(add(K::Dict)); return;
            case 0x8f: stack_.push_back(add(K::Set)); return;
            case 'J': push_int(static_cast<int32_t>(le(4))); return;
            case 'K': push_int(byte()); return;
            case 'M': push_int(static_cast<int64_t>(le(2))); return;
            case 'G': {  // BINFLOAT, big-endian
                const uint8_t* b = take(8);
                uint64_t bits = 0;
                for (int i = 0; i < 8; ++i) bits = (bits << 8) | b[i];
                PickleValue f;
                f.kind = K::Float;
                std::memcpy(&f.number, &bits, sizeof bits);
                stack_.push_back(add(std::move(f)));
                return;
            }
            case 'X': {  // BINUNICODE
                const uint64_t n = le(4);
                const uint8_t* b = take(n);
                push_string(std::string(reinterpret_cast<const char*>(b), n));
                return;
            }
            case 'U': {  // SHORT_BINSTRING
                const uint64_t n = byte();
                const uint8_t* b = take(n);
                push_string(std::string(reinterpret_cast<const char*>(b), n));
                return;
            }
            case 'Q': return persistent_id();
            case 'h': case 'j': {  // BINGET, LONG_BINGET
                const uint64_t i = op == 'h' ? byte() : le(4);
                auto it = memo_.find(i);
                if (it == memo_.end()) bad("memo entry " + std::to_string(i) + " read before it was written");
                stack_.push_back(it->second);
                return;
            }
            case 'q': case 'r': {  // BINPUT, LONG_BINPUT
                const uint64_t i = op == 'q' ? byte() : le(4);
                memo_[i] = top("BINPUT");
                return;
            }
            case 0x8a: {  // LONG1: little-endian two's complement
                const uint64_t n = byte();
                const uint8_t* b = take(n);
                if (n > 8) {
                    push_string(std::string(reinterpret_cast<const char*>(b), n), K::BigInt);
                    return;
                }
                uint64_t v = 0;
                for (uint64_t i = n; i-- > 0;) v = (v << 8) | b[i];
                if (n > 0 && n < 8 && (b[n - 1] & 0x80)) v |= ~uint64_t{0} << (8 * n);  // sign-extend
                push_int(static_cast<int64_t>(v));
                return;
            }
            default:
                bad("opcode " + hex_byte(op) + " (" + opcode_name(op) + ") at byte " + std::to_string(at) +
                    " is not one PyTorch's weights-only loader allows");
        }
    }

    void global() {
        std::string module = line(), name = line();
        if (module == "__builtin__") module = "builtins";  // protocol 2 written by Python 2
        const std::string full = module + "." + name;
        auto it = allowed_globals().find(full);
        if (it == allowed_globals().end())
            bad("refused global " + quote_name(full) +
                ": a checkpoint's pickle may name only the globals of tensors and state dicts (it could run code)");
        PickleValue g;
        g.kind = PickleValue::Kind::Global;
        g.integer = it->second.code;
        g.dtype = it->second.dtype;
        g.text = full;
        stack_.push_back(add(std::move(g)));
    }

    const PickleValue& as_global(uint32_t i, const char* op) {
        const PickleValue& g = val(i);
        if (g.kind != PickleValue::Kind::Global)
            bad(std::string(op) + " of a " + pickle_kind_name(g.kind) + ", which is not a callable global");
        return g;
    }
    std::vector<uint32_t> as_args(uint32_t i, const char* op) {
        if (val(i).kind != PickleValue::Kind::Tuple) bad(std::string(op) + " with arguments that are not a tuple");
        return val(i).items;
    }
    uint32_t inert(const std::string& name) {
        PickleValue v;
        v.kind = PickleValue::Kind::Inert;
        v.text = name;
        return add(std::move(v));
    }

    void reduce() {
        const std::vector<uint32_t> args = as_args(pop(), "REDUCE");
        uint32_t& slot = top("REDUCE");
        const PickleValue g = as_global(slot, "REDUCE");
        switch (static_cast<GlobalCode>(g.integer)) {
            case kOrderedDict: slot = ordered_dict(args); return;
            case kRebuildTensorV2: slot = rebuild_tensor(args); return;
            case kRebuildParameter:
            case kRebuildParameterWithState:
                if (args.size() != (g.integer == kRebuildParameter ? 3u : 4u) ||
                    val(args[0]).kind != PickleValue::Kind::Tensor)
                    bad(g.text + " with unexpected arguments");
                slot = args[0];
                return;
            case kCodecsEncode: slot = codecs_encode(args); return;
            case kSet: {
                PickleValue s;
                s.kind = PickleValue::Kind::Set;
                if (args.size() > 1) bad("builtins.set with more than one argument");
                if (args.size() == 1) {
                    const PickleValue& src = val(args[0]);
                    if (src.kind != PickleValue::Kind::List && src.kind != PickleValue::Kind::Tuple)
                        bad("builtins.set of a " + std::string(pickle_kind_name(src.kind)));
                    charge_copies(src.items.size());
                    s.items = src.items;
                }
                slot = add(std::move(s));
                return;
            }
            case kInertClass: slot = inert(g.text); return;
            case kParameterDict:
            case kParameter:
            case kStorageClass: break;
        }
        bad("refused to call " + quote_name(g.text) + " (REDUCE)");
    }

    void newobj() {
        const std::vector<uint32_t> args = as_args(pop(), "NEWOBJ");
        const PickleValue g = as_global(pop(), "NEWOBJ");
        switch (static_cast<GlobalCode>(g.integer)) {
            case kOrderedDict: stack_.push_back(ordered_dict(args)); return;
            case kParameter:
                if (args.empty() || args.size() > 2 || val(args[0]).kind != PickleValue::Kind::Tensor)
                    bad("torch.nn.parameter.Parameter with unexpected arguments");
                stack_.push_back(args[0]);
                return;
            case kInertClass:
            case kParameterDict: stack_.push_back(inert(g.text)); return;
            default: break;
        }
        bad("refused to create an object of " + quote_name(g.text) + " (NEWOBJ)");
    }

    void build() {
        const uint32_t state = pop();
        const uint32_t inst = top("BUILD");
        const PickleValue::Kind kind = val(inst).kind;
        if (kind == PickleValue::Kind::Inert && val(inst).text == "torch.nn.modules.container.ParameterDict" &&
            val(state).kind == PickleValue::Kind::Dict) {
            // The module's __dict__: its "_parameters" dict becomes the value (the parameters by name).
            const std::vector<uint32_t> items = val(state).items;
            for (size_t i = 0; i + 1 < items.size(); i += 2)
                if (val(items[i]).kind == PickleValue::Kind::String && val(items[i]).text == "_parameters" &&
                    val(items[i + 1]).kind == PickleValue::Kind::Dict) {
                    charge_copies(val(items[i + 1]).items.size());
                    val(inst).items = val(items[i + 1]).items;
                    val(inst).kind = PickleValue::Kind::Dict;
                }
            return;
        }
        // OrderedDict's and Parameter's __setstate__ change no value kiln reads; inert objects keep nothing.
        if (kind == PickleValue::Kind::Dict || kind == PickleValue::Kind::Inert || kind == PickleValue::Kind::Tensor)
            return;
        bad(std::string("BUILD on a ") + pickle_kind_name(kind));
    }

    uint32_t ordered_dict(const std::vector<uint32_t>& args) {
        PickleValue d;
        d.kind = PickleValue::Kind::Dict;
        if (args.size() > 1) bad("collections.OrderedDict with more than one argument");
        if (args.size() == 1) {
            const PickleValue& pairs = val(args[0]);
            if (pairs.kind != PickleValue::Kind::List && pairs.kind != PickleValue::Kind::Tuple)
                bad("collections.OrderedDict of a " + std::string(pickle_kind_name(pairs.kind)));
            charge_copies(2 * pairs.items.size());
            for (uint32_t p : pairs.items) {
                const PickleValue& pair = val(p);
                if (pair.kind != PickleValue::Kind::Tuple || pair.items.size() != 2)
                    bad("collections.OrderedDict of items that are not pairs");
                d.items.push_back(pair.items[0]);
                d.items.push_back(pair.items[1]);
            }
        }
        return add(std::move(d));
    }

    std::vector<int64_t> int_tuple(uint32_t i, const char* what) {
        const PickleValue& t = val(i);
        if (t.kind != PickleValue::Kind::Tuple) bad(std::string("tensor ") + what + " is not a tuple");
        if (t.items.size() > kMaxDims) bad(std::string("tensor ") + what + " has more than 16 dimensions");
        std::vector<int64_t> out;
        for (uint32_t x : t.items) {
            if (val(x).kind != PickleValue::Kind::Int) bad(std::string("tensor ") + what + " holds a non-integer");
            out.push_back(val(x).integer);
        }
        return out;
    }

    uint32_t rebuild_tensor(const std::vector<uint32_t>& args) {
        // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
        if (args.size() != 6 && args.size() != 7) bad("torch._utils._rebuild_tensor_v2 with " + std::to_string(args.size()) + " arguments");
        if (val(args[0]).kind != PickleValue::Kind::Storage) bad("a tensor rebuilt from a " + std::string(pickle_kind_name(val(args[0]).kind)) + ", not a storage");
        if (val(args[1]).kind != PickleValue::Kind::Int) bad("a tensor's storage offset is not an integer");
        PickleValue t;
        t.kind = PickleValue::Kind::Tensor;
        t.storage = args[0];
        t.dtype = val(args[0]).dtype;
        t.storage_offset = val(args[1]).integer;
        t.shape = int_tuple(args[2], "size");
        t.strides = int_tuple(args[3], "stride");
        if (t.shape.size() != t.strides.size()) bad("a tensor's size and stride differ in length");
        return add(std::move(t));
    }

    uint32_t codecs_encode(const std::vector<uint32_t>& args) {
        // _codecs.encode(text, 'latin1'): how protocol 2 spells bytes. Latin-1 maps code points 0..255 to bytes.
        if (args.size() != 2 || val(args[0]).kind != PickleValue::Kind::String ||
            val(args[1]).kind != PickleValue::Kind::String || (val(args[1]).text != "latin1" && val(args[1]).text != "latin-1"))
            bad("_codecs.encode with arguments other than (text, 'latin1')");
        const std::string& s = val(args[0]).text;
        std::string bytes;
        for (size_t i = 0; i < s.size();) {
            const uint8_t c = static_cast<uint8_t>(s[i]);
            if (c < 0x80) {
                bytes.push_back(static_cast<char>(c));
                i += 1;
            } else if ((c & 0xe0) == 0xc0 && c <= 0xc3 && i + 1 < s.size()) {  // U+0080..U+00FF
                bytes.push_back(static_cast<char>(((c & 0x03) << 6) | (static_cast<uint8_t>(s[i + 1]) & 0x3f)));
                i += 2;
            } else {
                bad("_codecs.encode of text outside Latin-1");
            }
        }
        PickleValue b;
        b.kind = PickleValue::Kind::Bytes;
        b.text = std::move(bytes);
        return add(std::move(b));
    }

    void persistent_id() {
        // ('storage', <storage class>, key, location, numel) from torch.save; a sixth item, the view
        // metadata, in the legacy format (None unless storages were views, which torch stopped writing).
        const PickleValue& pid = val(pop());
        using K = PickleValue::Kind;
        if (pid.kind != K::Tuple || pid.items.size() < 5 || pid.items.size() > 6 || val(pid.items[0]).kind != K::String ||
            val(pid.items[0]).text != "storage")
            bad("a persistent id that is not ('storage', class, key, location, size)");
        const PickleValue& cls = val(pid.items[1]);
        if (cls.kind != K::Global || cls.integer != kStorageClass)
            bad("a storage whose class is not one of torch's storage classes");
        if (val(pid.items[2]).kind != K::String) bad("a storage whose key is not text");
        if (val(pid.items[4]).kind != K::Int || val(pid.items[4]).integer < 0) bad("a storage whose size is not a count");
        if (pid.items.size() == 6 && val(pid.items[5]).kind != K::None)
            fail(ErrorKind::Unsupported, what_ + ": storage views (the legacy format's view metadata) are not supported");
        PickleValue s;
        s.kind = K::Storage;
        s.dtype = cls.dtype;
        s.text = val(pid.items[2]).text;
        s.storage_numel = static_cast<uint64_t>(val(pid.items[4]).integer);
        stack_.push_back(add(std::move(s)));
    }

    const uint8_t* p_;
    uint64_t size_;
    uint64_t pos_ = 0;
    std::string what_;
    PickleData out_;
    std::vector<uint32_t> stack_;
    std::vector<size_t> marks_;
    std::unordered_map<uint64_t, uint32_t> memo_;
    uint64_t copied_ = 0;
};

}  // namespace

const char* pickle_kind_name(PickleValue::Kind kind) {
    switch (kind) {
        case PickleValue::Kind::None: return "None";
        case PickleValue::Kind::Bool: return "bool";
        case PickleValue::Kind::Int: return "int";
        case PickleValue::Kind::BigInt: return "long int";
        case PickleValue::Kind::Float: return "float";
        case PickleValue::Kind::String: return "str";
        case PickleValue::Kind::Bytes: return "bytes";
        case PickleValue::Kind::Tuple: return "tuple";
        case PickleValue::Kind::List: return "list";
        case PickleValue::Kind::Dict: return "dict";
        case PickleValue::Kind::Set: return "set";
        case PickleValue::Kind::Global: return "global";
        case PickleValue::Kind::Storage: return "storage";
        case PickleValue::Kind::Tensor: return "tensor";
        case PickleValue::Kind::Inert: return "inert object";
    }
    return "?";
}

PickleData read_torch_pickle(const uint8_t* bytes, uint64_t size, const std::string& what) {
    return Reader(bytes, size, what).run();
}

}  // namespace kiln
