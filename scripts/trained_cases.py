#!/usr/bin/env python3
"""The trained models of scripts/fetch-trained-models.sh as cases that any backend replays.

For each model: an input that means something to it (a page with lines of text for the OCR
models, an object on a background for the background remover), ONNX Runtime's outputs for that
input (scripts/ort_reference.js, its CPU build), `hios import` at the size given below, and a
sequential schedule. Each case is a folder in the format of onnx_conformance.py --export, with
the task to judge 16-bit results by:

    OUT/<model>/case.json  g.json  g.safetensors  s.json  <input>.npy  expected.<output>.npy

    /usr/bin/python3 scripts/trained_cases.py [--models NAME ...] [--out output/trained-cases]
    python3 scripts/replay_cases.py output/trained-cases --backend cpu --task
    bash scripts/gpu.sh trained          # the same on the CUDA backend, in fp32, tf32 and bf16

Needs NumPy, a hios built with the importer (build/cli/hios), node, and ONNX Runtime's Node.js
package in scripts/ort (docs/data/trained-models/README.md).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def text_page(h, w, seed, paper, ink, rows=None):
    """Dark bars (words) on a light page, in the model's normalised units."""
    rng = np.random.RandomState(seed)
    img = np.full((h, w), paper, np.float32)
    line = max(8, h // 12) if rows is None else h // (2 * rows)
    y = line // 2
    while y + line <= h - line // 2:
        x = int(rng.randint(2, max(3, w // 20)))
        while x < w - 8:
            word = int(rng.randint(w // 40 + 4, w // 8 + 8))
            img[y:y + line, x:min(w - 4, x + word)] = ink
            x += word + int(rng.randint(line // 2 + 2, line + 4))
        y += 2 * line
    return np.repeat(img[None, None], 3, axis=1)


def object_scene(h, w, seed):
    """A bright disc and a box on a darker, slowly varying background, values in [0, 1)."""
    rng = np.random.RandomState(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.empty((1, 3, h, w), np.float32)
    for c in range(3):
        img[0, c] = 0.25 + 0.1 * np.sin(xx / w * 3 + c) * np.cos(yy / h * 2)
    disc = (yy - h * 0.45) ** 2 + (xx - w * 0.5) ** 2 < (0.22 * min(h, w)) ** 2
    box = (yy > h * 0.6) & (yy < h * 0.9) & (xx > w * 0.35) & (xx < w * 0.65)
    for c, v in enumerate((0.85, 0.6, 0.3)):
        img[0, c][disc | box] = v
    img += rng.uniform(0, 0.03, img.shape).astype(np.float32)
    return img


P2O = "p2o.DynamicDimension."
MODELS = {
    # The direction classifier and the recogniser normalise a line image to [-1, 1].
    "ppocr_mobile_v2_cls": dict(
        import_args=["--dim", P2O + "0=1", "--dim", P2O + "1=48", "--dim", P2O + "2=192"],
        inputs=lambda: {"x": text_page(48, 192, 1, 1.0, -1.0, rows=1)},
        task={"kind": "argmax", "axis": -1}),
    "ppocrv4_rec": dict(
        import_args=["--dim", P2O + "0=1", "--dim", P2O + "1=320"],
        inputs=lambda: {"x": text_page(48, 320, 2, 1.0, -1.0, rows=1)},
        task={"kind": "argmax", "axis": -1}),
    # The detector takes ImageNet-normalised pages; its map is thresholded at 0.3 in PaddleOCR.
    "ppocrv4_det": dict(
        import_args=["--batch", "1", "--height", "640", "--width", "640"],
        inputs=lambda: {"x": text_page(640, 640, 3, 0.8, -0.8)},
        task={"kind": "mask", "threshold": 0.3}),
    # IS-Net at 1024 x 1024; its package feeds images as x - 0.5 (the graph itself does not
    # normalise), so values lie in [-0.5, 0.5).
    "isnet_fp16": dict(
        import_args=[],
        inputs=lambda: {"input": object_scene(1024, 1024, 4) - np.float32(0.5)},
        task={"kind": "mask", "threshold": 0.5}),
}


def run(args, **kw):
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"trained_cases: {' '.join(args[:3])} ...: {(p.stderr.strip().splitlines() or ['failed'])[-1]}")
    return p.stdout


def make_case(name, spec, models, out, hios):
    model = os.path.join(models, name + ".onnx")
    if not os.path.isfile(model):
        sys.exit(f"trained_cases: {model} is missing (scripts/fetch-trained-models.sh)")
    case = os.path.join(out, name)
    tmp = case + ".new"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "ort"))
    feeds = spec["inputs"]()
    for input_name, value in feeds.items():
        np.save(os.path.join(tmp, input_name + ".npy"), value)
    dims = [a for a in spec["import_args"] if a.startswith(P2O)]
    run(["node", os.path.join(REPO, "scripts", "ort_reference.js"), model, os.path.join(tmp, "ort")]
        + [f"{k}={os.path.join(tmp, k + '.npy')}" for k in feeds]
        + sum((["--dim", d] for d in dims), []))
    with open(os.path.join(tmp, "ort", "outputs.json")) as f:
        ort = json.load(f)
    run([hios, "import", model, "-o", os.path.join(tmp, "g.json"), "--weights", os.path.join(tmp, "g.safetensors")]
        + spec["import_args"])
    run([hios, "schedule", "--graph", os.path.join(tmp, "g.json"), "--algo", "sequential", "-o",
         os.path.join(tmp, "s.json")])
    outputs = []
    for o in ort["outputs"]:
        expected = "expected." + o["file"]
        os.replace(os.path.join(tmp, "ort", o["file"]), os.path.join(tmp, expected))
        outputs.append([o["name"], o["name"] + ".npy", expected])
    shutil.rmtree(os.path.join(tmp, "ort"))
    with open(os.path.join(tmp, "case.json"), "w") as f:
        json.dump({"graph": "g.json", "schedule": "s.json", "inputs": [[k, k + ".npy"] for k in feeds],
                   "outputs": outputs, "task": spec["task"], "model": name + ".onnx",
                   "import_args": spec["import_args"]}, f, indent=1)
    shutil.rmtree(case, ignore_errors=True)
    os.replace(tmp, case)
    size = sum(os.path.getsize(os.path.join(case, x)) for x in os.listdir(case))
    print(f"{name}: {len(outputs)} outputs, {size / 2**20:.1f} MiB in {case}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--from", dest="models_dir", default=os.path.join(REPO, "output", "trained-models"))
    ap.add_argument("--out", default=os.path.join(REPO, "output", "trained-cases"))
    ap.add_argument("--hios", default=os.environ.get("HIOS", os.path.join(REPO, "build", "cli", "hios")))
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    for name in args.models:
        make_case(name, MODELS[name], args.models_dir, args.out, args.hios)
    return 0


if __name__ == "__main__":
    sys.exit(main())
