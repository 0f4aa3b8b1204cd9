#!/usr/bin/env python3
"""Makes the .ckpt fixtures of tests/io/ckpt_*_test.cpp with PyTorch's own torch.save, packed into
tests/data/ckpt/ckpt-fixtures.tar.xz (9 KB, 3 KB packed; the build unpacks it into build/test-data-ckpt).

Run with the oracle environment: /work/oracle-venv/bin/python scripts/make-ckpt-fixtures.py
The tensors' values follow a formula the tests compute too (value i of tensor k is (i - 5) * 0.25 + k,
exact in fp16, bf16 and fp32), so only torch's layout is stored, not expected numbers.
  small.ckpt       zip format, as a training checkpoint: {'state_dict': {...}, 'global_step', 'epoch'}
                   with fp16/fp32/bf16, a 0-d tensor, a Parameter, views of one storage with storage offsets,
                   and a model_ema.* key
  flat.ckpt        zip format, a bare state dict (no 'state_dict' level), as many merged checkpoints are
  legacy.ckpt      the pre-1.6 format (_use_new_zipfile_serialization=False) of flat.ckpt's dict
  strided.ckpt     zip format holding a transposed (non-contiguous) view
  ti_a1111.pt      a textual-inversion embedding as AUTOMATIC1111 saves it ('string_to_param': {'*': [2, 3]}, k = 7)
  ti_parameterdict.pt  the same layout with a torch.nn.ParameterDict, as older files have it (k = 8)
  small.expected   one line per tensor of small.ckpt: name dtype shape formula-index
  malicious/*.pkl  pickles that run code or use globals outside the allow-list, each must be refused
"""
import collections
import lzma
import os
import pickle
import shutil
import sys
import tarfile
import tempfile
import types

import torch

ARCHIVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "ckpt", "ckpt-fixtures.tar.xz")
OUT = tempfile.mkdtemp()


def values(k, n, dtype):
    return (torch.arange(n, dtype=torch.float32) - 5) * 0.25 + k


def main():
    os.makedirs(os.path.join(OUT, "malicious"), exist_ok=True)
    base = values(4, 12, torch.float32).reshape(3, 4)  # one storage, three views of it
    sd = collections.OrderedDict()
    sd["model.diffusion_model.a"] = values(0, 6, None).to(torch.float16).reshape(2, 3)
    sd["model.diffusion_model.b"] = values(1, 4, None)
    sd["model.diffusion_model.c"] = values(2, 6, None).to(torch.bfloat16).reshape(3, 2)
    sd["model.diffusion_model.scalar"] = values(3, 1, None)[0].clone()  # 0-d
    sd["model.diffusion_model.whole"] = base
    sd["model.diffusion_model.rows"] = base[1:]  # storage offset 4, shares base's storage
    sd["model.diffusion_model.row2"] = base[2]
    sd["model.diffusion_model.param"] = torch.nn.Parameter(values(5, 3, None), requires_grad=False)
    sd["model_ema.diffusion_modela"] = values(6, 6, None).to(torch.float16).reshape(2, 3)
    sd["model_ema.num_updates"] = torch.tensor(7, dtype=torch.int32)
    torch.save({"state_dict": sd, "global_step": 123, "epoch": 2, "note": "fixture"},
               os.path.join(OUT, "small.ckpt"))
    with open(os.path.join(OUT, "small.expected"), "w") as f:
        f.write("# name dtype shape(comma-separated, empty for 0-d) k first-index (values (i - 5) * 0.25 + k from i = first)\n")
        firsts = {"model.diffusion_model.rows": 4, "model.diffusion_model.row2": 8}
        ks = {"a": 0, "b": 1, "c": 2, "scalar": 3, "whole": 4, "rows": 4, "row2": 4, "param": 5}
        for name, t in sd.items():
            if t.dtype == torch.int32:
                continue
            short = name.split(".")[-1]
            k = ks.get(short, 6)
            f.write(f"{name} {str(t.dtype).replace('torch.', '')} {','.join(str(d) for d in t.shape)} {k} "
                    f"{firsts.get(name, 0)}\n")

    flat = collections.OrderedDict()
    flat["w16"] = values(0, 5, None).to(torch.float16)
    flat["w32"] = values(1, 4, None).reshape(2, 2)
    torch.save(flat, os.path.join(OUT, "flat.ckpt"))
    torch.save(flat, os.path.join(OUT, "legacy.ckpt"), _use_new_zipfile_serialization=False)
    torch.save({"t": values(0, 6, None).reshape(2, 3).t()}, os.path.join(OUT, "strided.ckpt"))
    # Textual-inversion files as AUTOMATIC1111 saves them, and the ParameterDict of older ones.
    a1111 = {"string_to_token": {"*": 265}, "string_to_param": {"*": values(7, 6, None).reshape(2, 3)},
             "name": "ti", "step": 5, "sd_checkpoint": None, "sd_checkpoint_name": None}
    torch.save(a1111, os.path.join(OUT, "ti_a1111.pt"))
    old = dict(a1111, string_to_param=torch.nn.ParameterDict(
        {"*": torch.nn.Parameter(values(8, 6, None).reshape(2, 3))}))
    torch.save(old, os.path.join(OUT, "ti_parameterdict.pt"))

    # Malicious pickles: each names what it would have run.
    class OsSystem:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    class Eval:
        def __reduce__(self):
            return (eval, ("1+1",))

    class Unknown:
        pass

    class NestedReduce:  # an allowed container holding a reduce of a forbidden callable
        def __reduce__(self):
            return (collections.OrderedDict, ([("x", OsSystem())],))

    def save(name, obj, protocol=2):
        with open(os.path.join(OUT, "malicious", name), "wb") as f:
            pickle.dump(obj, f, protocol=protocol)

    save("os_system.pkl", {"state_dict": OsSystem()})
    save("builtins_eval.pkl", [Eval()])
    Unknown.__module__ = "evil_module"
    Unknown.__qualname__ = Unknown.__name__ = "Payload"
    sys.modules["evil_module"] = types.ModuleType("evil_module")  # so that pickle can name the class
    sys.modules["evil_module"].Payload = Unknown
    save("unknown_global.pkl", {"a": Unknown()})
    save("nested_reduce.pkl", NestedReduce())
    # Hand-written: subprocess.check_output called (GLOBAL, REDUCE), and an allowed global called as it never is
    with open(os.path.join(OUT, "malicious", "subprocess.pkl"), "wb") as f:
        f.write(b"\x80\x02csubprocess\ncheck_output\nq\x00X\x02\x00\x00\x00idq\x01\x85q\x02Rq\x03.")
    with open(os.path.join(OUT, "malicious", "storage_call.pkl"), "wb") as f:
        f.write(b"\x80\x02ctorch\nFloatStorage\n)R.")
    # An allowed function applied to the wrong thing: OrderedDict is allowed, but REDUCE on a string is not a call
    with open(os.path.join(OUT, "malicious", "reduce_non_callable.pkl"), "wb") as f:
        f.write(b"\x80\x02X\x01\x00\x00\x00aq\x00)R.")
    # Opcodes outside the allow-list: INST (protocol 0 object creation) and STACK_GLOBAL (protocol 4)
    with open(os.path.join(OUT, "malicious", "bad_opcode_inst.pkl"), "wb") as f:
        f.write(b"(ios\nsystem\nS'id'\n.")
    with open(os.path.join(OUT, "malicious", "bad_opcode_stack_global.pkl"), "wb") as f:
        f.write(b"\x80\x04X\x02\x00\x00\x00osX\x06\x00\x00\x00system\x93X\x02\x00\x00\x00id\x85R.")
    def clean(info):  # the same archive for the same files
        info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
        return info

    with tarfile.open(ARCHIVE, "w:xz", preset=9 | lzma.PRESET_EXTREME) as tar:
        for root, dirs, files in os.walk(OUT):
            dirs.sort()
            for name in sorted(files):
                full = os.path.join(root, name)
                tar.add(full, arcname=os.path.relpath(full, OUT), filter=clean)
    shutil.rmtree(OUT)
    print("written", os.path.abspath(ARCHIVE), file=sys.stderr)


if __name__ == "__main__":
    main()
