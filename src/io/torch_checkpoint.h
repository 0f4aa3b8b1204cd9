// PyTorch checkpoints (.ckpt, .pt: what torch.save writes) read as a layout of tensors lying in the file, so
// that SafetensorsFile serves them exactly as a safetensors file (io/safetensors.h opens them by their magic).
// Two formats:
//   zip (PyTorch >= 1.6): "<dir>/data.pkl" (the pickled object) and "<dir>/data/<key>" (one storage each,
//     stored uncompressed, 64-byte aligned since PyTorch 1.10), "<dir>/byteorder" ("little" when present);
//   legacy (before 1.6): five pickles one after the other (magic number, protocol version 1001, system info,
//     the object, the list of storage keys), then each storage as an 8-byte element count and its bytes.
// The pickle is read by io/torch_pickle.h, which refuses anything that is not a state dict's content.
// Which tensors: as AUTOMATIC1111 loads a checkpoint, the dict under "state_dict" when the top-level dict
// has one, else the top-level dict; its tensor values by their keys, and those of dicts inside it as
// "outer.inner" (textual-inversion files: "string_to_param.*"). Everything else (global_step, epoch,
// optimizer states, callbacks) is skipped. Tensors must be contiguous views of their storage (any storage
// offset; storages may be shared between tensors); a strided view is Unsupported naming the tensor.
#pragma once
#include <cstdint>
#include <string>

#include "io/safetensors_header.h"  // SafetensorsLayout

namespace kiln {

// True when the bytes start as a legacy (pre-1.6) torch.save file: a protocol-2 pickle of its magic number.
bool is_legacy_torch_checkpoint(const uint8_t* file, uint64_t size);

// The tensors of a torch.save file (zip or legacy format) of `size` bytes at `file`. Malformed files and
// refused pickles: InvalidModel naming `path` and the problem; valid files kiln cannot read (big-endian,
// compressed entries, strided tensors): Unsupported.
SafetensorsLayout parse_torch_checkpoint_layout(const uint8_t* file, uint64_t size, const std::string& path);

}  // namespace kiln
