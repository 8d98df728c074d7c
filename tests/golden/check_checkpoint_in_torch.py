#!/usr/bin/env python3
"""Checks that PyTorch reads the checkpoints Trainyard writes (worker/trainer/checkpoint.h).

Run by hand (needs `pip install torch safetensors`):

    TY_KEEP_CHECKPOINT=/tmp/ty_ckpt ./build/tests/trainer_test --gtest_filter='CheckpointTest.*'
    python3 tests/golden/check_checkpoint_in_torch.py /tmp/ty_ckpt

The C++ test copies each checkpoint it writes to <dir>/<name>/step-*/ beside io.safetensors,
which holds an input `x` and the C++ model's output `out` for it. For every such <name>, this
script builds the torch model that the manifest's spec names (the definitions in
make_nn_golden.py), loads model.safetensors with safetensors.torch.load_file and
load_state_dict(strict=False), checks that only tied weights were missing, that every
tensor loaded exactly, that tied weights are still one tensor, and that torch's output for `x`
matches `out`. Prints OK and exits 0, or names the first problem and exits 1.
"""
import glob
import json
import os
import sys

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_nn_golden  # noqa: E402  (the zoo's models in PyTorch)

TIED = {"gpt": {"lm_head.weight": "transformer.wte.weight"}}


def build(spec):
    kind = spec["model"]
    c = spec[kind]
    if kind == "mlp":
        return make_nn_golden.MLP(c["sizes"], c.get("activation", "relu"), c.get("dropout", 0.0))
    if kind == "gpt":
        return make_nn_golden.gpt(c["vocab_size"], c["context"], c["n_layer"], c["n_head"],
                                  c["n_embd"], c.get("dropout", 0.0), c.get("bias", True))
    raise SystemExit(f"unknown model {kind!r} in the manifest spec")


def check(case_dir):
    steps = sorted(glob.glob(os.path.join(case_dir, "step-*")))
    if len(steps) != 1:
        raise SystemExit(f"{case_dir}: expected one step-* directory, found {steps}")
    step_dir = steps[0]
    with open(os.path.join(step_dir, "manifest.json")) as f:
        manifest = json.load(f)
    assert manifest["format"] == "trainyard.checkpoint" and manifest["version"] == 1, manifest
    kind = manifest["spec"]["model"]
    model = build(manifest["spec"])
    state = load_file(os.path.join(step_dir, manifest["model_file"]))
    result = model.load_state_dict(state, strict=False)
    tied = TIED.get(kind, {})
    assert not result.unexpected_keys, f"{step_dir}: unexpected keys {result.unexpected_keys}"
    assert set(result.missing_keys) == set(tied), f"{step_dir}: missing {result.missing_keys}"
    torch_state = model.state_dict()
    for key, tensor in state.items():
        assert torch.equal(torch_state[key], tensor), f"{step_dir}: {key} differs after loading"
    for alias, target in tied.items():
        assert torch_state[alias].data_ptr() == torch_state[target].data_ptr(), alias
        assert torch.equal(torch_state[alias], state[target]), alias

    if manifest.get("optimizer_file"):  # not torch.optim's layout, but a readable file
        load_file(os.path.join(step_dir, manifest["optimizer_file"]))

    io = load_file(os.path.join(case_dir, "io.safetensors"))
    model.eval()
    with torch.no_grad():
        out = model(io["x"])
    err = (out - io["out"]).abs().max().item()
    scale = io["out"].abs().max().item()
    assert err <= 1e-5 * max(scale, 1.0), f"{step_dir}: output differs by {err} (scale {scale})"
    print(f"{kind}: {len(state)} tensors from {step_dir}, max |torch - trainyard| = {err:.3g}")


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    cases = sorted(d for d in glob.glob(os.path.join(sys.argv[1], "*")) if os.path.isdir(d))
    if not cases:
        raise SystemExit(f"{sys.argv[1]}: no checkpoints; run trainer_test with "
                         "TY_KEEP_CHECKPOINT set to this directory first")
    for case in cases:
        check(case)
    print("OK")


if __name__ == "__main__":
    main()
