#!/usr/bin/env python3
"""A torchvision or timm model exported to ONNX, with an input and PyTorch's output for it.

The model is built untrained (no download) with seeded weights, and its batch norms get
measured statistics (torch_weights.calibrate_batch_norms), so the exported file carries real,
non-trivial parameters. Writes:

  OUT/model.onnx (+ model.onnx.data)   the exported model
  OUT/input.npy                        a seeded input, (1, 3, SIZE, SIZE) float32
  OUT/torch.npy                        PyTorch's output for it, fp32 (TF32 off), eval mode
  OUT/torch-tf32.npy, torch-bf16.npy   with --formats (on a GPU): PyTorch's own output in TF32
                                       and with the model and input cast to bfloat16, so that
                                       hios's error can be set beside the format's own
  OUT/onnxruntime.npy                  with --onnxruntime: ONNX Runtime's output (CPU, fp32)

  python3 scripts/torch_onnx_export.py --model resnet50 --size 224 --exporter legacy|dynamo --out DIR

`--exporter legacy` is torch.onnx.export's TorchScript exporter (opset 17), `dynamo` the
torch.export-based one (opset 18, weights as external data). scripts/gpu.sh onnx imports
the file with `hios import`, runs it and compares (torch_weights.py --compare).
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_weights import calibrate_batch_norms, torchvision_model  # noqa: E402


def build(name, seed, size):
    import torch
    torch.manual_seed(seed)
    if name == "nasnetalarge":
        import timm
        model = timm.create_model("nasnetalarge", pretrained=False)
    else:
        kwargs = {}
        if name in ("inception_v3", "googlenet"):
            kwargs.update(aux_logits=False, init_weights=True)
        model = torchvision_model(name, size=size, **kwargs)
    calibrate_batch_norms(model, seed, size=min(size, 299))
    return model.eval()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--exporter", choices=("legacy", "dynamo", "none"), default="legacy",
                    help="none: only the input and PyTorch's output (for --batch)")
    ap.add_argument("--batch", type=int, default=1, help="images in the input and the reference output")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--formats", action="store_true", help="also PyTorch's TF32 and bf16 outputs (CUDA only)")
    ap.add_argument("--onnxruntime", action="store_true", help="also ONNX Runtime's output for the exported file")
    a = ap.parse_args()
    import torch
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    os.makedirs(a.out, exist_ok=True)
    model = build(a.model, a.seed, a.size)
    x = np.random.RandomState(a.seed).standard_normal((a.batch, 3, a.size, a.size)).astype(np.float32)
    np.save(os.path.join(a.out, "input.npy"), x)
    path = os.path.join(a.out, "model.onnx")
    xt = torch.from_numpy(x)
    if a.exporter == "none":
        pass
    elif a.exporter == "legacy":
        torch.onnx.export(model, (xt,), path, opset_version=17, dynamo=False, input_names=["x"], output_names=["y"])
    else:
        torch.onnx.export(model, (xt,), path, opset_version=18, dynamo=True, external_data=True,
                          input_names=["x"], output_names=["y"])
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = model.to(device)
    with torch.no_grad():  # in chunks of 16 images: a batch of 100 at 1024 would not fit
        y = np.concatenate([model(xt[i:i + 16].to(device)).float().cpu().numpy() for i in range(0, a.batch, 16)])
    np.save(os.path.join(a.out, "torch.npy"), y)
    if a.formats and device == "cuda":
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cuda.matmul.allow_tf32 = True
        with torch.no_grad():
            np.save(os.path.join(a.out, "torch-tf32.npy"), model(xt.to(device)).float().cpu().numpy())
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        with torch.no_grad():  # weights, activations and input in bfloat16, as hios's --math bf16
            y16 = model.to(torch.bfloat16)(xt.to(device, torch.bfloat16))
            np.save(os.path.join(a.out, "torch-bf16.npy"), y16.float().cpu().numpy())
    if a.onnxruntime and a.exporter != "none":
        import onnxruntime
        sess = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        np.save(os.path.join(a.out, "onnxruntime.npy"), sess.run(None, {sess.get_inputs()[0].name: x})[0])
    print(f"wrote {a.out}: {a.model} {a.exporter} {x.shape} -> {y.shape}")


if __name__ == "__main__":
    main()
