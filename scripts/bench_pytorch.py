#!/usr/bin/env python3
"""PyTorch reference timings for the GPU benchmark (scripts/gpu.sh bench).

For each model and resolution, the variants of --variants (default: all of them), batch 1,
torch.backends.cudnn.benchmark = True, inference mode:

  eager               fp32 tensors, TF32 convolutions and matrix products (cudnn.allow_tf32
                      and cuda.matmul.allow_tf32 on, as hios --math tf32)
  cuda-graph          the same, captured once and replayed
  compile-ro          torch.compile(mode="reduce-overhead"), TF32, NCHW
  compile-ro-cl       the same with channels_last model and input
  compile-ma-cl       torch.compile(mode="max-autotune"), TF32, channels_last (minutes per
                      shape: it autotunes every convolution)
  compile-ro-cl-bf16  reduce-overhead, channels_last, torch.autocast(bfloat16)
  compile-ro-cl-fp16  reduce-overhead, channels_last, torch.autocast(float16)
  compile-ro-cl-bf16-pure  reduce-overhead, channels_last, model and input cast to bfloat16
                      (every tensor 16-bit, no fp32 islands: what hios --math bf16 stores)

Every row records its math ("tf32", "bf16", "fp16"), the model's FLOPs (counted once per
model and size with torch.utils.flop_counter on an eager pass: a multiply-add is 2 FLOPs) and
the share of the device's dense tensor-core peak at that precision it reaches. Each time is the median of `--iters`
passes timed with CUDA events after `--warmup` untimed ones. Peak memory is
torch.cuda.max_memory_allocated over the timed eager passes (weights, activations and cuDNN
workspaces, what the caching allocator handed out). One JSON object per line goes to --json.

  inception_v3  torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=False)
  nasnet_large  timm.create_model('nasnetalarge', pretrained=False)
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_weights import SEGMENTATION, VISION_TRANSFORMERS, torchvision_model  # noqa: E402

torch = None  # imported in main(), so that --report runs where PyTorch is not installed


def build(name, size=None):
    if name == "inception_v3":
        import torchvision

        return torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=False)
    if name == "nasnet_large":
        import timm

        return timm.create_model("nasnetalarge", pretrained=False)
    if name in SEGMENTATION or name in VISION_TRANSFORMERS:
        return torchvision_model(name, size=size)
    raise SystemExit(f"bench_pytorch.py: unknown model {name!r} (inception_v3, nasnet_large, "
                     f"{', '.join(SEGMENTATION + VISION_TRANSFORMERS)})")


def time_passes(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(iters):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop))
    return samples


# Dense tensor-core peaks in TFLOP/s by precision (NVIDIA's datasheets for the SXM parts; the
# sparse figures are twice these). Looked up by a substring of the device name.
PEAK_TFLOPS = {
    "H200": {"tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
    "H100": {"tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
    "A100": {"tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
}

BATCH = 1  # --batch: the images per pass of every variant

ALL_VARIANTS = ["eager", "cuda-graph", "compile-ro", "compile-ro-cl", "compile-ma-cl", "compile-ro-cl-bf16",
                "compile-ro-cl-fp16", "compile-ro-cl-bf16-pure"]


def peak_tflops(device, math):
    for key, peaks in PEAK_TFLOPS.items():
        if key in device:
            return peaks.get(math)
    return None


def tc_share(r):
    """Achieved FLOP/s over the device's tensor-core peak at the row's precision, or None."""
    peak = peak_tflops(r.get("device", ""), r.get("math", "tf32"))
    if not peak or not r.get("flops") or not r.get("median_ms"):
        return None
    return r["flops"] / (r["median_ms"] * 1e-3) / (peak * 1e12)


def row(model, size, variant, samples, peak_mib, extra=None, math="tf32"):
    r = {
        "impl": "pytorch",
        "variant": variant,
        "model": model,
        "size": size,
        "batch": BATCH,
        "gpus": 1,
        "math": math,
        "cuda_graph": variant != "eager",
        "median_ms": statistics.median(samples),
        "min_ms": min(samples),
        "max_ms": max(samples),
        "iters": len(samples),
        "peak_mib": peak_mib,
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
    }
    if extra:
        r.update(extra)
    return r


def count_flops(model, x):
    try:
        from torch.utils.flop_counter import FlopCounterMode
    except ImportError:
        return None
    counter = FlopCounterMode(display=False)
    with counter:
        model(x)
    return int(counter.get_total_flops())


def compiled_variant(model_name, size, variant, warmup, iters, flops):
    """One torch.compile variant on a fresh model (compiling mutates nothing, but channels_last
    does): its row, with the compile time."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = build(model_name, size).cuda().eval()
    x = torch.randn(BATCH, 3, size, size, device="cuda")
    if "-cl" in variant:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    math = "bf16" if "bf16" in variant else "fp16" if "fp16" in variant else "tf32"
    mode = "max-autotune" if variant.startswith("compile-ma") else "reduce-overhead"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(math)
    pure = variant.endswith("-pure")
    if pure:
        model = model.to(dtype)
        x = x.to(dtype)
    fn = torch.compile(model, mode=mode)

    def step():
        if dtype is None or pure:
            return fn(x)
        with torch.autocast("cuda", dtype=dtype):
            return fn(x)

    with torch.inference_mode():
        # The peak counts from before the first call: reduce-overhead allocates its CUDA graph's
        # private pool (the activations) while warming up, and a reset after that would miss it.
        torch.cuda.reset_peak_memory_stats()
        t0 = time.time()
        for _ in range(3):  # reduce-overhead records its CUDA graph after a couple of calls
            step()
        torch.cuda.synchronize()
        compile_s = time.time() - t0
        samples = time_passes(step, warmup, iters)
        peak = torch.cuda.max_memory_allocated() / 2**20
    r = row(model_name, size, variant, samples, peak, {"compile_s": compile_s, "flops": flops}, math=math)
    del fn, model, x
    torch.cuda.empty_cache()
    return r


def bench(model_name, size, warmup, iters, variants):
    torch.manual_seed(0)
    model = build(model_name, size).cuda().eval()
    x = torch.randn(BATCH, 3, size, size, device="cuda")
    rows = []
    with torch.inference_mode():
        t0 = time.time()
        model(x)  # cudnn.benchmark picks algorithms here
        torch.cuda.synchronize()
        first_s = time.time() - t0
        flops = count_flops(model, x)
        torch.cuda.reset_peak_memory_stats()
        eager = time_passes(lambda: model(x), warmup, iters)
        peak = torch.cuda.max_memory_allocated() / 2**20
        if "eager" in variants:
            rows.append(row(model_name, size, "eager", eager, peak, {"first_pass_s": first_s, "flops": flops}))

    if "cuda-graph" in variants:
        with torch.inference_mode():
            # CUDA graph: warm up on a side stream (as torch.cuda.graphs asks), capture, replay.
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    model(x)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = model(x)
            del out
            torch.cuda.reset_peak_memory_stats()
            replay = time_passes(graph.replay, warmup, iters)
            peak_graph = torch.cuda.max_memory_allocated() / 2**20
            rows.append(row(model_name, size, "cuda-graph", replay, peak_graph, {"flops": flops}))
            del graph
    del model, x
    torch.cuda.empty_cache()
    for variant in variants:
        if variant.startswith("compile"):
            try:
                rows.append(compiled_variant(model_name, size, variant, warmup, iters, flops))
            except Exception as e:  # a variant that does not compile is a row, not the end
                print(f"# {model_name} {size} {variant}: failed: {type(e).__name__}: {e}", file=sys.stderr,
                      flush=True)
    return rows


def load_rows(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def report(path):
    """The benchmark table (nccl-tests style) from the JSON lines of both benchmarks."""
    rows = load_rows(path)
    keys = sorted({(r["model"], r["size"]) for r in rows}, key=lambda k: (k[0], k[1]))

    def pick(model, size, pred):
        c = [r for r in rows if r["model"] == model and r["size"] == size and pred(r)]
        return min(c, key=lambda r: r["median_ms"]) if c else None

    devices = sorted({r.get("device", "?") for r in rows})
    print("# hios vs PyTorch, batch 1, fp32 tensors, TF32 convolutions, median of timed passes (CUDA events)")
    for d in devices:
        print(f"#  device: {d}")
    torch_rows = [r for r in rows if r["impl"] == "pytorch"]
    if torch_rows:
        print(f"#  torch {torch_rows[0].get('torch')}, cuDNN {torch_rows[0].get('cudnn')} (PyTorch's own)")
    print("#")
    print("#                        ------- PyTorch -------   ------------------ hios, 1 GPU -------------------   ---------------- hios, 2 GPUs ----------------")
    print("#  model           size  eager  graph   peak      seq   ratio   peak    best1 via            peak     2gpu via            speedup  err      check")
    print("#                        (ms)   (ms)    (MiB)     (ms)  seq/tg  (MiB)   (ms)                 (MiB)    (ms)                b1/2gpu  vs seq")
    worst = 0.0
    summary = []
    for model, size in keys:
        te = pick(model, size, lambda r: r["impl"] == "pytorch" and r["variant"] == "eager")
        tg = pick(model, size, lambda r: r["impl"] == "pytorch" and r["variant"] == "cuda-graph")
        hs = pick(model, size, lambda r: r["impl"] == "hios" and r["variant"] == "sequential" and r["cuda_graph"])
        b1 = pick(model, size, lambda r: r["impl"] == "hios" and r["gpus"] == 1 and r["cuda_graph"])
        h2 = pick(model, size, lambda r: r["impl"] == "hios" and r["gpus"] == 2 and r["cuda_graph"])

        def f(r, key="median_ms", fmt="{:6.2f}"):
            return fmt.format(r[key]) if r else "   n/a"

        ratio = hs["median_ms"] / tg["median_ms"] if hs and tg else None
        speed = b1["median_ms"] / h2["median_ms"] if b1 and h2 else None
        err = h2.get("rel_err_vs_sequential") if h2 else None
        check = "ok"
        if err is not None and not err < 1e-2:
            check = "FAIL"
        if hs is None:
            check = "missing"
        via = b1["variant"] if b1 else "n/a"
        via2 = h2["variant"] if h2 else "n/a"
        print(f"  {model:<14} {size:5d} {f(te)} {f(tg)} {f(te, 'peak_mib', '{:8.0f}')}  {f(hs)}  "
              f"{('{:5.2f}'.format(ratio) if ratio else '  n/a')}  {f(hs, 'peak_mib', '{:7.0f}')}  {f(b1)} "
              f"{via:<18} {f(b1, 'peak_mib', '{:6.0f}')}   {f(h2)} {via2:<18}  "
              f"{('{:5.2f}'.format(speed) if speed else '  n/a')}    "
              f"{('{:.1e}'.format(err) if err is not None else '  n/a  ')}  {check}")
        if ratio:
            worst = max(worst, ratio)
            summary.append(ratio)
    if summary:
        print(f"# seq/PyTorch-graph: worst {worst:.2f}, geometric mean "
              f"{statistics.geometric_mean(summary):.2f} over {len(summary)} configurations (target <= 1.00)")
    strongest(rows, keys, pick)
    return 0


def strongest(rows, keys, pick):
    """The best PyTorch per model, size and precision, the variant it came from, and hios's best
    one-GPU run at the same precision beside it (fp32 tensors with TF32 convolutions against
    "tf32"; 16-bit storage against autocast in that type); "TC%" is the share of the tensor-core
    peak at that precision, "peak" each side's peak memory."""
    maths = sorted({r.get("math", "tf32") for r in rows if r["impl"] == "pytorch"})
    if not any(r["variant"].startswith("compile") for r in rows if r["impl"] == "pytorch"):
        return
    print("#")
    print("# strongest PyTorch per precision (any variant) against hios's best one-GPU run at that precision")
    print("#  model           size  math  best PyTorch (ms)  via                   TC%    peak MiB   "
          "hios best1 (ms)  via                TC%    peak MiB  hios/PyTorch")
    for model, size in keys:
        flops = next((r.get("flops") for r in rows if r["model"] == model and r["size"] == size and r.get("flops")), None)
        for math in maths:
            best = pick(model, size, lambda r: r["impl"] == "pytorch" and r.get("math", "tf32") == math)
            if not best:
                continue
            b1 = pick(model, size, lambda r: r["impl"] == "hios" and r["gpus"] == 1 and r["cuda_graph"]
                      and r.get("math", "tf32") == math)
            share = tc_share(best)
            hshare = None
            if b1 and flops:
                hshare = tc_share(dict(b1, flops=flops, math=math, device=best.get("device", "")))
            ratio = b1["median_ms"] / best["median_ms"] if b1 else None
            pct = (lambda v: f"{100 * v:5.1f}%" if v is not None else "   n/a")
            print(f"  {model:<14} {size:5d}  {math:<4}  {best['median_ms']:17.3f}  {best['variant']:<20} {pct(share)}  "
                  f"{best.get('peak_mib', float('nan')):8.0f}   "
                  f"{(b1['median_ms'] if b1 else float('nan')):15.3f}  {(b1['variant'] if b1 else 'n/a'):<18} "
                  f"{pct(hshare)}  {(b1['peak_mib'] if b1 else float('nan')):8.0f}  "
                  f"{('{:8.2f}'.format(ratio) if ratio else '     n/a')}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", default="", help="print the table for this JSON-lines file and exit")
    ap.add_argument("--models", default="inception_v3,nasnet_large")
    ap.add_argument("--sizes", default="331,512,1024,2048")
    ap.add_argument("--batch", type=int, default=1, help="images per pass (default 1)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--json", default="", help="append one JSON object per row to this file")
    ap.add_argument("--variants", default=",".join(ALL_VARIANTS),
                    help="comma-separated, from: " + ", ".join(ALL_VARIANTS))
    args = ap.parse_args()
    global BATCH
    BATCH = args.batch
    if args.report:
        return report(args.report)

    global torch
    import torch as torch_module

    torch = torch_module
    if not torch.cuda.is_available():
        raise SystemExit("bench_pytorch.py: no CUDA device visible")
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = True          # PyTorch's default for convolutions
    # Matrix products on TF32 tensor cores too, as hios --math tf32 runs them (PyTorch's default
    # keeps nn.Linear and matmul in fp32; a transformer's time is mostly those products).
    torch.backends.cuda.matmul.allow_tf32 = True

    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in ALL_VARIANTS]
    if unknown:
        raise SystemExit(f"bench_pytorch.py: unknown variant(s) {unknown} (known: {', '.join(ALL_VARIANTS)})")
    out = open(args.json, "a") if args.json else None
    for model in args.models.split(","):
        for size in [int(s) for s in args.sizes.split(",")]:
            for r in bench(model, size, args.warmup, args.iters, variants):
                print(f"{r['model']:<14} {'pytorch-' + r['variant']:<26} {r['size']:5d}  1  {r['math']:<4} "
                      f"{'graph' if r['cuda_graph'] else 'eager'} {r['median_ms']:9.3f} {r['min_ms']:9.3f} "
                      f"{r['max_ms']:9.3f} {r['peak_mib']:10.1f}", flush=True)
                if out:
                    out.write(json.dumps(r) + "\n")
                    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
