#!/usr/bin/env python3
"""Writes PyTorch references for the model zoo tests (tests/worker/nn/*_test.cc).

Run by hand (needs `pip install torch`):  python3 tests/golden/make_nn_golden.py
The PyTorch modules below are the ones the zoo's headers (worker/nn/{mlp,cnn,resnet,gpt}.h)
say they match; the configs must stay in step with the C++ tests. It rewrites two files:

tests/golden/nn_state_dicts.txt: for each config, every state_dict entry in order, then the
parameter count (model.parameters(), which lists a tied tensor once):
  model <name>
  entry <key> <dtype> <ndim> <dims...>
  ...
  params <n>
  end

tests/golden/nn_parity.txt: forward values of small models with random weights, in the format
of tests/golden/make_golden.py (read by tests/testing/golden.h). Each case holds the whole
state dict as `state.<key>`, the input `x` and the outputs. The C++ test loads the state into
its model with LoadStateDict and compares outputs (max |a - b| <= 1e-5 * max |b|).
"""
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


# ---- The zoo's models in PyTorch ------------------------------------------------------------

class MLP(nn.Module):
    def __init__(self, sizes, activation="relu", dropout=0.0):
        super().__init__()
        for i in range(len(sizes) - 1):
            setattr(self, f"fc{i + 1}", nn.Linear(sizes[i], sizes[i + 1]))
        self.act = {"relu": nn.ReLU(), "gelu": nn.GELU(), "tanh": nn.Tanh()}[activation]
        self.dropout = nn.Dropout(dropout)
        self.n = len(sizes) - 1

    def forward(self, x):
        x = x.flatten(1)
        for i in range(1, self.n + 1):
            x = getattr(self, f"fc{i}")(x)
            if i < self.n:
                x = self.dropout(self.act(x))
        return x


class CNN(nn.Module):
    def __init__(self, in_channels=1, image_size=28, num_classes=10, channels1=32,
                 channels2=64, hidden=128, dropout=0.25):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels1, 3, padding=1)
        self.conv2 = nn.Conv2d(channels1, channels2, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        side = image_size // 2 // 2
        self.fc1 = nn.Linear(channels2 * side * side, hidden)
        self.dropout = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = self.dropout(F.relu(self.fc1(x)))
        return self.fc2(x)


class BasicBlock(nn.Module):  # torchvision.models.resnet.BasicBlock
    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, in_channels=3, num_classes=10, base_width=64, blocks=(2, 2, 2, 2)):
        super().__init__()
        w = base_width
        self.conv1 = nn.Conv2d(in_channels, w, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(w)
        self.relu = nn.ReLU(inplace=True)
        inplanes = w
        for i, n in enumerate(blocks):
            planes, stride = w * 2**i, (1 if i == 0 else 2)
            layer = [BasicBlock(inplanes, planes, stride)]
            layer += [BasicBlock(planes, planes) for _ in range(n - 1)]
            setattr(self, f"layer{i + 1}", nn.Sequential(*layer))
            inplanes = planes
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(w * 8, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# nanoGPT (karpathy/nanoGPT model.py), the parts the zoo's Gpt matches.
class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        assert c["n_embd"] % c["n_head"] == 0
        self.c_attn = nn.Linear(c["n_embd"], 3 * c["n_embd"], bias=c["bias"])
        self.c_proj = nn.Linear(c["n_embd"], c["n_embd"], bias=c["bias"])
        self.attn_dropout = nn.Dropout(c["dropout"])
        self.resid_dropout = nn.Dropout(c["dropout"])
        self.n_head = c["n_head"]
        self.n_embd = c["n_embd"]
        self.dropout = c["dropout"]

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0,
            is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class GptMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c["n_embd"], 4 * c["n_embd"], bias=c["bias"])
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * c["n_embd"], c["n_embd"], bias=c["bias"])
        self.dropout = nn.Dropout(c["dropout"])

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = LayerNorm(c["n_embd"], bias=c["bias"])
        self.attn = CausalSelfAttention(c)
        self.ln_2 = LayerNorm(c["n_embd"], bias=c["bias"])
        self.mlp = GptMLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c["vocab_size"], c["n_embd"]),
            wpe=nn.Embedding(c["context"], c["n_embd"]),
            drop=nn.Dropout(c["dropout"]),
            h=nn.ModuleList([Block(c) for _ in range(c["n_layer"])]),
            ln_f=LayerNorm(c["n_embd"], bias=c["bias"]),
        ))
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c["n_layer"]))

    def get_num_params(self, non_embedding=True):
        n_params = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n_params -= self.transformer.wpe.weight.numel()
        return n_params

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx):  # all positions' logits, as nanoGPT's forward with targets
        b, t = idx.size()
        assert t <= self.c["context"]
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def gpt(vocab_size, context, n_layer, n_head, n_embd, dropout=0.0, bias=True):
    return GPT(dict(vocab_size=vocab_size, context=context, n_layer=n_layer, n_head=n_head,
                    n_embd=n_embd, dropout=dropout, bias=bias))


# ---- nn_state_dicts.txt ---------------------------------------------------------------------

# Same configs as tests/worker/nn/*_test.cc (kStateDictConfigs there).
STATE_DICT_MODELS = {
    "mlp_default": lambda: MLP([784, 128, 10]),
    "mlp_deep": lambda: MLP([12, 32, 16, 8, 5], "gelu", 0.1),
    "cnn_default": lambda: CNN(),
    "cnn_rgb": lambda: CNN(3, 32, 100, 16, 32, 64, 0.5),
    "resnet18_w16": lambda: ResNet(3, 10, 16),  # ResNet-18 at a quarter of the width
    "resnet_small": lambda: ResNet(1, 7, 8, (1, 2, 1, 3)),
    "gpt_small": lambda: gpt(65, 32, 2, 4, 32),
    "gpt_nobias": lambda: gpt(50, 16, 3, 2, 8, bias=False),
}

DTYPES = {torch.float32: "float32", torch.int64: "int64"}


def write_state_dicts(path):
    lines = [f"# generated by tests/golden/make_nn_golden.py with torch {torch.__version__}"]
    for name, make in STATE_DICT_MODELS.items():
        model = make()
        lines.append(f"model {name}")
        for key, t in model.state_dict().items():
            dims = " ".join(str(d) for d in t.shape)
            lines.append(f"entry {key} {DTYPES[t.dtype]} {t.dim()} {dims}".rstrip())
        lines.append(f"params {sum(p.numel() for p in model.parameters())}")
        lines.append("end")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


# ---- nn_parity.txt --------------------------------------------------------------------------

def randomize(model, gen):
    """Random weights, so that a parameter used in the wrong place shows in the output."""
    with torch.no_grad():
        for key, t in model.state_dict().items():
            if key.endswith("num_batches_tracked"):
                t.fill_(3)
            elif key.endswith("running_var"):
                t.copy_(torch.rand(t.shape, generator=gen) + 0.5)
            else:
                t.copy_(torch.randn(t.shape, generator=gen) * 0.3)


def tensor_lines(name, t):
    kind = "f32" if t.is_floating_point() else "i64"
    dims = " ".join(str(d) for d in t.shape)
    head = f"tensor {name} {kind} {t.dim()} {dims}".rstrip()
    flat = t.detach().reshape(-1).tolist()
    body = " ".join(("%.9g" % v) if kind == "f32" else str(int(v)) for v in flat)
    return [head, body]


def case_lines(name, model, tensors):
    lines = [f"case {name}"]
    for key, t in model.state_dict().items():
        lines += tensor_lines("state." + key, t)
    for key, t in tensors.items():
        lines += tensor_lines(key, t)
    return lines + ["end"]


def mlp_case(gen):
    model = MLP([12, 16, 8, 5], "gelu")
    randomize(model, gen)
    model.eval()
    x = torch.randn(4, 3, 4, generator=gen)
    return case_lines("mlp", model, {"x": x, "out": model(x)})


def cnn_case(gen):
    model = CNN(2, 8, 4, 3, 5, 6, 0.25)
    randomize(model, gen)
    model.eval()
    x = torch.randn(2, 2, 8, 8, generator=gen)
    return case_lines("cnn", model, {"x": x, "out": model(x)})


def resnet_case(gen):
    model = ResNet(3, 5, 2, (2, 1, 1, 1))
    randomize(model, gen)
    before = case_lines("resnet", model, {})[:-1]  # the state before training mode runs
    x = torch.randn(2, 3, 8, 8, generator=gen)
    model.train()
    out_train = model(x)
    after = {"after." + k: v.clone() for k, v in model.state_dict().items()
             if k in ("bn1.running_mean", "layer2.0.downsample.1.running_var",
                      "layer4.0.bn2.num_batches_tracked")}
    model.eval()
    out_eval = model(x)
    tensors = {"x": x, "out_train": out_train, **after, "out_eval": out_eval}
    for key, t in tensors.items():
        before += tensor_lines(key, t)
    return before + ["end"]


def gpt_case(gen):
    model = gpt(11, 8, 2, 2, 16)
    randomize(model, gen)
    model.eval()
    idx = torch.randint(0, 11, (2, 6), generator=gen)
    targets = torch.randint(0, 11, (2, 6), generator=gen)
    logits = model(idx)
    loss = F.cross_entropy(logits.view(-1, 11), targets.view(-1))
    wte = model.transformer.wte.weight
    c_attn = model.transformer.h[0].attn.c_attn.weight
    g_wte, g_attn = torch.autograd.grad(loss, [wte, c_attn])
    return case_lines("gpt", model, {
        "x": idx, "out": logits, "targets": targets, "loss": loss,
        "grad.transformer.wte.weight": g_wte,
        "grad.transformer.h.0.attn.c_attn.weight": g_attn})


def write_parity(path):
    gen = torch.Generator().manual_seed(0)
    lines = [f"# generated by tests/golden/make_nn_golden.py with torch {torch.__version__}"]
    for make in (mlp_case, cnn_case, resnet_case, gpt_case):
        lines += make(gen)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    torch.manual_seed(0)
    write_state_dicts(os.path.join(HERE, "nn_state_dicts.txt"))
    write_parity(os.path.join(HERE, "nn_parity.txt"))
