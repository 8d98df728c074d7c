#!/usr/bin/env python3
"""Safetensors interoperability fixture for tests/worker/tensor/safetensors_test.cc.

Run by hand, never by the build (needs `pip install torch safetensors numpy`):

  python3 tests/golden/make_safetensors_fixture.py
      Rewrites tests/golden/torch_written.safetensors with the real `safetensors` package
      (safetensors.torch.save_file) from torch tensors of every dtype Trainyard supports
      (F32, F64, BF16, F16, I64, I32, U8, BOOL; a 0-dim and an empty tensor among them), and
      tests/golden/torch_written.json with what the C++ test expects to load:
        {"metadata": {...},
         "tensors": [{"name", "dtype", "shape", "values": [row-major, bool as 0/1]}, ...]}
      listing the tensors in the order of the file's header. Floating values are written as
      the exact double of each element (Python's repr round-trips), integers exactly.

  python3 tests/golden/make_safetensors_fixture.py --check FILE
      The reverse direction: loads FILE, written by the C++ side, with
      safetensors.torch.load_file and compares names, order, dtypes, shapes, values and
      metadata with tests/golden/torch_written.json; prints OK or what differs and exits 1.
      To get such a file from the C++ side:

        TY_SAFETENSORS_EXPORT=/tmp/cpp_written.safetensors \\
            ./build/tests/tensor_test --gtest_filter='SafetensorsInteropTest.*'
        python3 tests/golden/make_safetensors_fixture.py --check /tmp/cpp_written.safetensors

      (The C++ test loads the torch fixture and saves it again with SaveSafetensors; it also
      checks that the result is byte-for-byte the file torch wrote.)
"""
import json
import os
import struct
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "torch_written.safetensors")
EXPECTED = os.path.join(HERE, "torch_written.json")

# One metadata entry: the Rust writer keeps metadata in a hash map, so with more entries their
# order in the header would vary from run to run.
METADATA = {"source": "torch \u2713 \"quoted\"\n"}

DTYPE_NAMES = {
    torch.float32: "F32", torch.float64: "F64", torch.bfloat16: "BF16", torch.float16: "F16",
    torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8", torch.bool: "BOOL",
}


def make_tensors():
    return {
        "layer.weight": torch.tensor([[1.5, -2.25, 3.0e-8], [1e30, -0.0, 0.1]],
                                     dtype=torch.float32),
        "layer.bias_bf16": torch.tensor([1.0, -0.5, 3.14159, 1e-3], dtype=torch.bfloat16),
        "half": torch.tensor([[0.5, -65504.0], [6e-8, 1.0009765625]], dtype=torch.float16),
        "step": torch.tensor(0.1, dtype=torch.float64),  # 0-dim
        "ids": torch.tensor([-2**63, 2**53 + 1, 2**63 - 1], dtype=torch.int64),
        "counts": torch.tensor([[-2**31, 7], [0, 2**31 - 1]], dtype=torch.int32),
        "pixels": torch.tensor([0, 1, 127, 128, 255], dtype=torch.uint8),
        "mask": torch.tensor([True, False, True]),
        "empty": torch.zeros(0, 3, dtype=torch.float32),
    }


def header_order(path):
    """Tensor names in the order the file's JSON header lists them."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return [k for k in header if k != "__metadata__"]


def describe(name, t):
    values = t.flatten().tolist()
    if t.dtype == torch.bool:
        values = [int(v) for v in values]
    return {"name": name, "dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
            "values": values}


def write():
    tensors = make_tensors()
    save_file(tensors, FIXTURE, metadata=METADATA)
    loaded = load_file(FIXTURE)
    expected = {"metadata": METADATA,
                "tensors": [describe(k, loaded[k]) for k in header_order(FIXTURE)]}
    with open(EXPECTED, "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")
    print(f"wrote {FIXTURE} ({os.path.getsize(FIXTURE)} bytes) and {EXPECTED}")


def check(path):
    with open(EXPECTED) as f:
        expected = json.load(f)
    loaded = load_file(path)
    with safe_open(path, framework="pt") as f:
        metadata = f.metadata() or {}
    got = {"metadata": metadata,
           "tensors": [describe(k, loaded[k]) for k in header_order(path)]}
    problems = []
    if got["metadata"] != expected["metadata"]:
        problems.append(f"metadata {got['metadata']!r} != {expected['metadata']!r}")
    names = [t["name"] for t in got["tensors"]]
    want_names = [t["name"] for t in expected["tensors"]]
    if names != want_names:
        problems.append(f"tensor names/order {names} != {want_names}")
    for g, e in zip(got["tensors"], expected["tensors"]):
        if g != e:
            problems.append(f"tensor {e['name']!r}: got {g} expected {e}")
    with open(path, "rb") as a, open(FIXTURE, "rb") as b:
        same_bytes = a.read() == b.read()
    if problems:
        print("\n".join(problems))
        sys.exit(1)
    print(f"OK: {path} loads in safetensors/torch with the expected tensors and metadata"
          f" ({'byte-identical to' if same_bytes else 'bytes differ from'} the torch fixture)")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        check(sys.argv[2])
    elif len(sys.argv) == 1:
        write()
    else:
        sys.exit(__doc__)
