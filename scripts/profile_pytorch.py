#!/usr/bin/env python3
"""Where PyTorch's GPU time goes, kernel by kernel: the counterpart of hios's per-node profile
(hios-gpu-bench --profile N), for the analysis of what separates the two stacks.

For one model and size, batch 1, each variant of --variants is run --passes times under
torch.profiler (CUDA activity), and the kernels are summed by name:

  eager     fp32 tensors, TF32 convolutions, NCHW
  eager-cl  the same with channels_last model and input
  compile   torch.compile (default mode: no CUDA graph, so every kernel is visible), TF32,
            channels_last
  compile-bf16  the same under torch.autocast(bfloat16)

Prints, per variant, the GPU time per pass split into classes (convolution/GEMM kernels,
layout transposes, Triton-generated fused kernels, other) and the --top kernels by time.
With --json, one object per variant goes to that file (appended).
"""
import argparse
import collections
import json
import sys

torch = None


def classify(name):
    n = name.lower()
    if n.startswith("triton"):
        return "triton"
    if "nchwtonhwc" in n or "nhwctonchw" in n or "transpose" in n or "convert" in n:
        return "layout"
    for key in ("conv", "implicit", "xmma", "cutlass", "gemm", "sm90", "sm80", "cudnn", "wgrad", "dgrad"):
        if key in n:
            return "conv/gemm"
    return "other"


def run_variant(model_name, size, variant, passes):
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from bench_pytorch import build  # the same model definitions as the benchmark

    dev = torch.device("cuda")
    model = build(model_name).eval().to(dev)
    x = torch.randn(1, 3, size, size, device=dev)
    cl = variant != "eager"
    if cl:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    fn = model
    if variant.startswith("compile"):
        fn = torch.compile(model)
    ctx = torch.autocast("cuda", dtype=torch.bfloat16) if variant.endswith("bf16") else torch.autocast("cuda",
                                                                                                       enabled=False)
    with torch.inference_mode(), ctx:
        for _ in range(5):
            fn(x)
        torch.cuda.synchronize()
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(passes):
                fn(x)
            torch.cuda.synchronize()
    per_kernel = collections.defaultdict(lambda: [0.0, 0])
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA and ev.name:
            # A kernel event's own time; memcpy/memset rows are kept as they are.
            k = per_kernel[ev.name]
            k[0] += ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
            k[1] += 1
    return per_kernel


def main():
    global torch
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="inception_v3")
    ap.add_argument("--size", type=int, default=2048)
    ap.add_argument("--variants", default="eager,eager-cl,compile,compile-bf16")
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    import torch as t

    torch = t
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = True
    for v in a.variants.split(","):
        kernels = run_variant(a.model, a.size, v, a.passes)
        total_us = sum(k[0] for k in kernels.values()) / a.passes
        classes = collections.defaultdict(float)
        for name, (us, _) in kernels.items():
            classes[classify(name)] += us / a.passes
        print(f"\n## {a.model} @ {a.size}, {v}: {total_us / 1000:.3f} ms of kernels per pass, "
              f"{sum(k[1] for k in kernels.values()) // a.passes} launches")
        print("   " + ", ".join(f"{c} {us / 1000:.3f} ms" for c, us in sorted(classes.items(), key=lambda i: -i[1])))
        top = sorted(kernels.items(), key=lambda i: -i[1][0])[: a.top]
        for name, (us, count) in top:
            print(f"   {us / a.passes / 1000:8.3f} ms  x{count // a.passes:<4d} {classify(name):9s} {name[:110]}")
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps({"model": a.model, "size": a.size, "variant": v, "kernel_ms": total_us / 1000,
                                    "classes_ms": {c: us / 1000 for c, us in classes.items()},
                                    "top": [[n, us / a.passes / 1000, c // a.passes] for n, (us, c) in top]}) + "\n")


if __name__ == "__main__":
    main()
