#!/usr/bin/env python3
"""A torchvision model's parameters as a hios weights file, and PyTorch's output to compare with.

hios's built-in models name their nodes after torchvision's modules (models/inception_v3.cpp),
so a hios conv node N takes torchvision's module N: a BasicConv2d (conv + batch norm, folded
here into one weight and bias, as hios computes it) or a plain Conv2d, and a linear node N takes
the Linear module N. The model is built untrained (no download) with seeded weights, and its
batch norms get seeded running statistics, so the fold is exercised. Writes:

  OUT/weights.safetensors   the parameters, named as hios reads them (docs/graph-format.md)
  OUT/graph.json            the hios graph given, naming that weights file
  OUT/input.npy             a seeded input, (N, 3, H, W) float32
  OUT/torch.npy             PyTorch's output for it, fp32 (TF32 off), eval mode

Then `hios run --graph OUT/graph.json --input OUT/input.npy --save-output OUT/hios.npy` and
`torch_weights.py --compare OUT/torch.npy OUT/hios.npy` (scripts/gpu.sh torch-check).

  python3 scripts/torch_weights.py --model inception_v3 --graph g.json --out DIR [--seed 0]
"""
import argparse
import json
import os
import struct
import sys

import numpy as np


def save_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a.tobytes())
    header["__metadata__"] = {"format": "pt", "writer": "scripts/torch_weights.py"}
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def hios_nodes(graph):
    nodes = [graph["input"]]
    for b in graph["blocks"]:
        nodes += b["nodes"]
    return nodes


def fold(conv, bn):
    """Conv (no bias) followed by eval-mode batch norm, as one conv with a bias."""
    w = conv.weight.detach().double().cpu().numpy()
    b = conv.bias.detach().double().cpu().numpy() if conv.bias is not None else np.zeros(w.shape[0])
    scale = bn.weight.detach().double().cpu().numpy() / np.sqrt(bn.running_var.double().cpu().numpy() + bn.eps)
    shift = bn.bias.detach().double().cpu().numpy() - bn.running_mean.double().cpu().numpy() * scale
    return w * scale[:, None, None, None], b * scale + shift


def parameters_for(model, graph):
    import torch.nn as nn
    modules = dict(model.named_modules())
    tensors, missing = {}, []
    for n in hios_nodes(graph):
        op, name = n["op"], n["name"]
        if op not in ("conv", "linear"):
            continue
        owner = n.get("params_from", name)
        m = modules.get(owner)
        if op == "conv" and m is not None and hasattr(m, "conv") and hasattr(m, "bn"):
            w, b = fold(m.conv, m.bn)
        elif op == "conv" and isinstance(m, nn.Conv2d) or op == "linear" and isinstance(m, nn.Linear):
            w = m.weight.detach().double().cpu().numpy()
            b = m.bias.detach().double().cpu().numpy() if m.bias is not None else None
        else:
            missing.append(f"{name} ({op})")
            continue
        tensors[owner + ".weight"] = w
        if n.get("bias", True) and b is not None:
            tensors[owner + ".bias"] = b
    if missing:
        sys.exit(f"torch_weights.py: no torchvision module for hios node(s): {', '.join(missing)}")
    return tensors


def build(model_name, seed):
    import torch
    import torchvision
    torch.manual_seed(seed)
    kwargs = {"weights": None}
    if model_name == "inception_v3":
        kwargs.update(aux_logits=False, init_weights=True)
    model = getattr(torchvision.models, model_name)(**kwargs)
    g = torch.Generator().manual_seed(seed + 1)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            with torch.no_grad():
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                m.bias.copy_(torch.rand(m.bias.shape, generator=g) * 0.2 - 0.1)
                m.running_mean.copy_(torch.rand(m.running_mean.shape, generator=g) * 0.2 - 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
    calibrate_batch_norms(model, seed)
    return model.eval()


# torchvision's segmentation networks: built without any downloaded weights, they return a dict
# ({"out": the class map}); torchvision_model wraps them to return the map as a tensor, which
# is what the ONNX exporters and torch.compile's timings take.
SEGMENTATION = ("lraspp_mobilenet_v3_large", "deeplabv3_resnet50", "deeplabv3_resnet101",
                "deeplabv3_mobilenet_v3_large", "fcn_resnet50", "fcn_resnet101")


# torchvision's vision transformers: their position embeddings fix the image size, so the
# model is built for the size it will run at (image_size).
VISION_TRANSFORMERS = ("vit_b_16", "vit_b_32", "vit_l_16", "vit_l_32", "vit_h_14")


def torchvision_model(name, size=None, **kwargs):
    """torchvision.models.<name> untrained (no download); a segmentation network returns its map.
    A vision transformer is built for SIZE x SIZE images (default 224)."""
    import torch
    import torchvision
    if name in VISION_TRANSFORMERS and size:
        kwargs.setdefault("image_size", size)
    if name not in SEGMENTATION:
        model = getattr(torchvision.models, name)(weights=None, **kwargs)
        if name in VISION_TRANSFORMERS:
            # torchvision starts a ViT's classifier at zero: every output would be 0, and no
            # comparison of outputs could fail. Seeded weights (torch's generator) instead.
            torch.nn.init.normal_(model.heads.head.weight, std=0.02)
            torch.nn.init.normal_(model.heads.head.bias, std=0.02)
        return model
    model = getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None, aux_loss=False,
                                                           **kwargs)

    class SegmentationMap(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x)["out"]

    return SegmentationMap(model)


def calibrate_batch_norms(model, seed, size=299):
    """Running statistics measured on seeded images, as training would leave them.

    Seeded statistics alone let an untrained deep model's activations grow by orders of
    magnitude per block (logits near 1e14), where rounding differences say little; measured ones
    keep every layer's output near unit scale, like a trained model's."""
    import torch
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    if not bns:  # a transformer: nothing to measure, and a ViT takes only its own image size
        return
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the calibration batches
    model.train()
    g = torch.Generator().manual_seed(seed + 2)
    with torch.no_grad():
        for _ in range(2):
            model(torch.randn((2, 3, size, size), generator=g))
    model.eval()


def compare(ref_path, got_path):
    ref, got = np.load(ref_path).astype(np.float64), np.load(got_path).astype(np.float64)
    if ref.shape != got.shape:
        sys.exit(f"shapes differ: {ref_path} {ref.shape}, {got_path} {got.shape}")
    max_abs = float(np.abs(ref - got).max())
    max_rel = max_abs / max(float(np.abs(ref).max()), 1e-30)
    same_top1 = float(np.mean(ref.argmax(axis=-1) == got.argmax(axis=-1))) if ref.ndim == 2 else float("nan")
    print(json.dumps({"max_abs": max_abs, "max_rel": max_rel, "top1_agreement": same_top1, "shape": list(ref.shape)}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model")
    ap.add_argument("--graph")
    ap.add_argument("--out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compare", nargs=2, metavar=("REF", "GOT"))
    a = ap.parse_args()
    if a.compare:
        return compare(*a.compare)
    if not (a.model and a.graph and a.out):
        ap.error("--model, --graph and --out (or --compare REF GOT)")
    import torch
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    graph = json.load(open(a.graph))
    model = build(a.model, a.seed)
    os.makedirs(a.out, exist_ok=True)
    save_safetensors(os.path.join(a.out, "weights.safetensors"), parameters_for(model, graph))
    graph["weights"] = "weights.safetensors"
    with open(os.path.join(a.out, "graph.json"), "w") as f:
        json.dump(graph, f)
    x = np.random.RandomState(a.seed).standard_normal((graph["batch"], 3, graph["height"], graph["width"]))
    x = x.astype(np.float32)
    np.save(os.path.join(a.out, "input.npy"), x)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.no_grad():
        y = model.to(device)(torch.from_numpy(x).to(device)).float().cpu().numpy()
    np.save(os.path.join(a.out, "torch.npy"), y)
    print(f"wrote {a.out}: {a.model} {x.shape} -> {y.shape} on {device}")


if __name__ == "__main__":
    main()
