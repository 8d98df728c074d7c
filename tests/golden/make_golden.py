#!/usr/bin/env python3
"""Writes golden values from PyTorch for tests/worker/ops/golden_test.cc.

Run by hand (needs `pip install torch`):  python3 tests/golden/make_golden.py
It rewrites tests/golden/ops.txt. Every case has float32 inputs (or int64 indices) drawn
from a fixed seed, the forward output, a cotangent `cot` and the gradient of sum(out * cot)
with respect to each floating input (`grad.<name>`). The C++ test runs the same op on the same
inputs and compares forward values and gradients (max |a - b| <= 1e-5 * max |b|). A floating
tensor X is differentiated in C++ exactly when the case has a `grad.X` entry.

Format (text): for each case
  case <name>
  tensor <name> <f32|i64> <ndim> <dims...>
  <values, space separated>
  ...
  end
"""
import math
import os

import torch
import torch.nn.functional as F

torch.manual_seed(0)
CASES = []


def r(*shape, lo=-1.0, hi=1.0):
    return torch.rand(*shape) * (hi - lo) + lo


def case(name, fn, inputs, consts=None):
    """inputs: dict name -> tensor, in argument order; floating ones are differentiated.
    consts: tensors passed after the inputs that get no gradient. fn(*inputs, *consts)."""
    consts = consts or {}
    leaves = {k: (v.clone().requires_grad_(True) if v.is_floating_point() else v)
              for k, v in inputs.items()}
    out = fn(*leaves.values(), *consts.values())
    tensors = {**inputs, **consts}
    tensors["out"] = out.detach()
    floating = [k for k, v in leaves.items() if v.is_floating_point()]
    if out.is_floating_point() and floating:
        cot = torch.randn(out.shape)
        grads = torch.autograd.grad(out, [leaves[k] for k in floating], cot, allow_unused=True)
        tensors["cot"] = cot
        for k, g in zip(floating, grads):
            if g is not None:
                tensors["grad." + k] = g
    CASES.append((name, tensors))


def idx(*shape, high):
    return torch.randint(0, high, shape)


def elementwise():
    a, b, pos = r(3, 1, 5), r(4, 1), r(4, 5, lo=0.5, hi=2.0)
    case("add", lambda a, b: torch.add(a, b, alpha=0.7), {"a": a, "b": b})
    case("sub", lambda a, b: torch.sub(a, b, alpha=1.3), {"a": a, "b": b})
    case("mul", lambda a, b: a * b, {"a": a, "b": b})
    case("div", lambda a, b: a / b, {"a": a, "b": pos})
    case("maximum", torch.maximum, {"input": a, "other": b})
    case("minimum", torch.minimum, {"input": a, "other": b})
    case("pow_tensor", torch.pow, {"input": pos, "exponent": b})
    x, p = r(5, 3), r(5, 3, lo=0.3, hi=2.0)
    for name, f in [("neg", torch.neg), ("exp", torch.exp), ("abs", torch.abs),
                    ("relu", F.relu), ("gelu", F.gelu),
                    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")),
                    ("sigmoid", torch.sigmoid), ("tanh", torch.tanh), ("silu", F.silu),
                    ("clamp", lambda x: torch.clamp(x, -0.5, 0.4)),
                    ("pow_scalar", lambda x: torch.pow(x, 2.0)),
                    ("affine", lambda x: x * 3.0 + 1.5)]:
        case(name, f, {"x": x})
    for name, f in [("log", torch.log), ("sqrt", torch.sqrt), ("rsqrt", torch.rsqrt),
                    ("pow_frac", lambda x: torch.pow(x, 2.5))]:
        case(name, f, {"x": p})
    cond = r(2, 3) > 0
    case("where", lambda c, a, b: torch.where(c.bool(), a, b),
         {"c": cond.long(), "a": r(2, 3), "b": r(3)})


def reductions():
    x = r(3, 4, 5)
    case("sum_dim", lambda x: x.sum(dim=(0, 2), keepdim=True), {"x": x})
    case("sum_all", lambda x: x.sum(), {"x": x})
    case("mean_dim", lambda x: x.mean(dim=-1), {"x": x})
    case("var_dim", lambda x: x.var(dim=1), {"x": x})
    case("max_dim", lambda x: x.max(dim=1).values, {"x": x})
    case("min_dim", lambda x: x.min(dim=2, keepdim=True).values, {"x": x})
    case("max_all", lambda x: x.max(), {"x": x})
    case("argmax", lambda x: x.argmax(dim=1), {"x": x})


def linalg_and_nn():
    case("matmul_2d", torch.matmul, {"input": r(3, 4), "other": r(4, 5)})
    case("matmul_batched", torch.matmul, {"input": r(2, 1, 3, 4), "other": r(3, 4, 2)})
    case("matmul_vec", torch.matmul, {"input": r(4), "other": r(4, 3)})
    case("linear", F.linear, {"input": r(2, 3, 4), "weight": r(5, 4), "bias": r(5)})
    x = r(3, 7)
    case("softmax", lambda x: F.softmax(x, dim=-1), {"x": x})
    case("softmax_dim0", lambda x: F.softmax(x, dim=0), {"x": x})
    case("log_softmax", lambda x: F.log_softmax(x, dim=-1), {"x": x})
    logits = r(6, 5, lo=-3, hi=3)
    target = torch.tensor([0, 4, 2, 2, 1, 3])
    case("cross_entropy", lambda x, t: F.cross_entropy(x, t), {"x": logits, "t": target})
    t_ign = torch.tensor([0, -100, 2, -100, 1, 3])
    case("cross_entropy_ignore_smooth",
         lambda x, t: F.cross_entropy(x, t, ignore_index=-100, label_smoothing=0.1),
         {"x": logits, "t": t_ign})
    case("cross_entropy_sum", lambda x, t: F.cross_entropy(x, t, reduction="sum"),
         {"x": logits, "t": target})
    case("cross_entropy_none_3d", lambda x, t: F.cross_entropy(x, t, reduction="none"),
         {"x": r(2, 5, 3), "t": idx(2, 3, high=5)})
    case("mse_loss", F.mse_loss, {"input": r(4, 3), "target": r(4, 3)})
    case("embedding", lambda w, i: F.embedding(i, w), {"w": r(7, 4), "i": idx(2, 3, high=7)})
    case("layer_norm", lambda x, w, b: F.layer_norm(x, (6,), w, b),
         {"x": r(2, 3, 6), "w": r(6), "b": r(6)})
    case("batch_norm_train",
         lambda x, w, b: F.batch_norm(x, torch.zeros(3), torch.ones(3), w, b, training=True),
         {"x": r(4, 3, 2, 2), "w": r(3), "b": r(3)})
    case("batch_norm_eval",
         lambda x, w, b, m, v: F.batch_norm(x, m, v, w, b, training=False),
         {"x": r(4, 3, 2, 2), "w": r(3), "b": r(3)},
         consts={"m": r(3), "v": r(3, lo=0.5, hi=1.5)})


def conv_pool_attention():
    case("conv2d", lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
         {"x": r(2, 3, 7, 6), "w": r(4, 3, 3, 3), "b": r(4)})
    case("conv2d_dilated_groups",
         lambda x, w: F.conv2d(x, w, None, stride=1, padding=2, dilation=2, groups=2),
         {"x": r(2, 4, 7, 6), "w": r(6, 2, 3, 3)})
    x = r(2, 3, 7, 6)
    case("max_pool2d", lambda x: F.max_pool2d(x, 3, stride=2, padding=1), {"x": x})
    case("avg_pool2d", lambda x: F.avg_pool2d(x, 2, stride=2), {"x": x})
    case("avg_pool2d_pad", lambda x: F.avg_pool2d(x, 3, stride=2, padding=1), {"x": x})
    case("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (3, 4)), {"x": x})
    case("sdpa_causal",
         lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
         {"q": r(2, 2, 5, 4), "k": r(2, 2, 5, 4), "v": r(2, 2, 5, 3)})


def joins_and_indexing():
    case("cat", lambda a, b: torch.cat([a, b], dim=1), {"a": r(2, 3), "b": r(2, 4)})
    case("stack", lambda a, b: torch.stack([a, b], dim=1), {"a": r(2, 3), "b": r(2, 3)})
    case("split", lambda x: torch.cat(list(torch.split(x, 2, dim=1))[::-1], dim=1),
         {"x": r(3, 5)})
    case("index_select", lambda x, i: torch.index_select(x, 1, i),
         {"x": r(3, 4), "i": torch.tensor([3, 0, 3])})
    case("gather", lambda x, i: torch.gather(x, 1, i), {"x": r(3, 4), "i": idx(3, 2, high=4)})
    case("masked_fill", lambda x, m: x.masked_fill(m.bool(), -2.0),
         {"x": r(3, 4), "m": (r(1, 4) > 0).long()})
    case("one_hot", lambda i: F.one_hot(i, 5), {"i": idx(4, high=5)})


def models():
    torch.manual_seed(1)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    params = {f"p{i}": p.detach().clone() for i, p in enumerate(mlp.parameters())}

    def mlp_loss(x, t, p0, p1, p2, p3):
        h = F.gelu(F.linear(x, p0, p1))
        return F.cross_entropy(F.linear(h, p2, p3), t)

    case("mlp", mlp_loss, {"x": r(5, 8), "t": idx(5, high=4), **params})

    block = {
        "ln1_w": 1 + 0.1 * r(8), "ln1_b": 0.1 * r(8),
        "attn_w": r(24, 8) / math.sqrt(8), "attn_b": 0.1 * r(24),
        "proj_w": r(8, 8) / math.sqrt(8), "proj_b": 0.1 * r(8),
        "ln2_w": 1 + 0.1 * r(8), "ln2_b": 0.1 * r(8),
        "fc_w": r(32, 8) / math.sqrt(8), "fc_b": 0.1 * r(32),
        "fc2_w": r(8, 32) / math.sqrt(32), "fc2_b": 0.1 * r(8),
    }

    def transformer_block(x, ln1_w, ln1_b, attn_w, attn_b, proj_w, proj_b, ln2_w, ln2_b,
                          fc_w, fc_b, fc2_w, fc2_b):
        B, T, C, H = 2, 5, 8, 2
        h = F.layer_norm(x, (C,), ln1_w, ln1_b)
        q, k, v = F.linear(h, attn_w, attn_b).split(C, dim=2)
        heads = lambda t: t.view(B, T, H, C // H).transpose(1, 2)
        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        x = x + F.linear(y, proj_w, proj_b)
        h = F.layer_norm(x, (C,), ln2_w, ln2_b)
        return x + F.linear(F.gelu(F.linear(h, fc_w, fc_b), approximate="tanh"), fc2_w, fc2_b)

    case("transformer_block", transformer_block, {"x": r(2, 5, 8), **block})


def write(path):
    with open(path, "w") as f:
        f.write("# generated by tests/golden/make_golden.py with torch %s\n" % torch.__version__)
        for name, tensors in CASES:
            f.write(f"case {name}\n")
            for k, t in tensors.items():
                t = t.detach().contiguous()
                kind = "f32" if t.is_floating_point() else "i64"
                vals = t.reshape(-1).tolist()
                text = " ".join(("%.9g" % v) if kind == "f32" else str(int(v)) for v in vals)
                f.write(f"tensor {k} {kind} {t.dim()} {' '.join(map(str, t.shape))}\n{text}\n")
            f.write("end\n")


if __name__ == "__main__":
    elementwise()
    reductions()
    linalg_and_nn()
    conv_pool_attention()
    joins_and_indexing()
    models()
    write(os.path.join(os.path.dirname(os.path.abspath(__file__)), "ops.txt"))
    print(f"wrote {len(CASES)} cases")
