#!/usr/bin/env python3
"""A Hugging Face BERT encoder with seeded weights: exported to ONNX with its inputs and
PyTorch's output, and (with --bench) torch.compile's time for it.

  python3 scripts/bert_case.py --config base|large --seq 128 --out DIR [--bench JSONL] [--no-export]

The model is built from transformers' BertConfig (base: its defaults; large: 1024 wide, 24
layers, 16 heads), untrained, its weights drawn from --seed. Writes:

  DIR/model.onnx             torch.onnx.export's TorchScript exporter (opset 17), inputs
                             input_ids and attention_mask (int64, [1, SEQ]), output the last
                             hidden state; attention written out (attn_implementation "eager")
  DIR/input_ids.npy          seeded token ids
  DIR/attention_mask.npy     ones, the last eighth of the sequence zero (padding)
  DIR/torch.npy              PyTorch's output for them, fp32 with TF32 off

--bench appends torch.compile (reduce-overhead) rows in TF32 and in bf16 (autocast) to JSONL,
in scripts/bench_pytorch.py's row format (model bert_base or bert_large, size = the sequence
length), timed with PyTorch's default attention (SDPA).
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def config(name):
    from transformers import BertConfig
    if name == "base":
        return BertConfig()
    if name == "large":
        return BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
    raise SystemExit(f"bert_case.py: unknown config {name!r} (base, large)")


def build(name, seed, attention):
    import torch
    from transformers import BertModel
    torch.manual_seed(seed)
    model = BertModel(config(name), add_pooling_layer=False, attn_implementation=attention)
    return model.eval()


class Encoder:
    """The model as a module of two tensors returning one (the exporter's and compile's form)."""

    def __new__(cls, model):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask):
                return self.m(input_ids=input_ids, attention_mask=attention_mask, return_dict=False)[0]

        return Wrapped(model).eval()


def inputs(seq, seed, vocab):
    rng = np.random.RandomState(seed)
    ids = rng.randint(0, vocab, size=(1, seq)).astype(np.int64)
    mask = np.ones((1, seq), dtype=np.int64)
    mask[0, seq - seq // 8:] = 0
    return ids, mask


def bench(a, ids, mask, path):
    import torch
    import bench_pytorch
    bench_pytorch.torch = torch  # its timing loop reads the module's torch
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    rows = []
    for math in ("tf32", "bf16"):
        torch._dynamo.reset()
        model = Encoder(build(a.config, a.seed, "sdpa")).cuda()
        x, m = torch.from_numpy(ids).cuda(), torch.from_numpy(mask).cuda()
        fn = torch.compile(model, mode="reduce-overhead")

        def step():
            if math == "tf32":
                return fn(x, m)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return fn(x, m)

        with torch.inference_mode():
            torch.cuda.reset_peak_memory_stats()
            t0 = time.time()
            for _ in range(3):
                step()
            torch.cuda.synchronize()
            compile_s = time.time() - t0
            samples = bench_pytorch.time_passes(step, a.warmup, a.iters)
        rows.append({"impl": "pytorch", "variant": "compile-ro" + ("-bf16" if math == "bf16" else ""),
                     "model": "bert_" + a.config, "size": a.seq, "batch": 1, "gpus": 1, "math": math,
                     "cuda_graph": True, "median_ms": statistics.median(samples), "min_ms": min(samples),
                     "max_ms": max(samples), "iters": len(samples),
                     "peak_mib": torch.cuda.max_memory_allocated() / 2**20, "device": torch.cuda.get_device_name(0),
                     "torch": torch.__version__, "compile_s": compile_s})
        print(f"bert_{a.config} seq {a.seq} torch.compile {math}: {rows[-1]['median_ms']:.3f} ms")
        del fn, model
        torch.cuda.empty_cache()
    with open(path, "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="base")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bench", help="append torch.compile's rows to this JSONL (on a GPU)")
    ap.add_argument("--no-export", action="store_true", help="only --bench")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=30)
    a = ap.parse_args()
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.makedirs(a.out, exist_ok=True)
    ids, mask = inputs(a.seq, a.seed, config(a.config).vocab_size)
    if not a.no_export:
        model = Encoder(build(a.config, a.seed, "eager"))
        np.save(os.path.join(a.out, "input_ids.npy"), ids)
        np.save(os.path.join(a.out, "attention_mask.npy"), mask)
        x, m = torch.from_numpy(ids), torch.from_numpy(mask)
        torch.onnx.export(model, (x, m), os.path.join(a.out, "model.onnx"), opset_version=17, dynamo=False,
                          input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"])
        with torch.no_grad():
            y = model(x, m).float().numpy()
        np.save(os.path.join(a.out, "torch.npy"), y)
        print(f"wrote {a.out}: bert_{a.config} seq {a.seq} -> {y.shape}")
    if a.bench:
        bench(a, ids, mask, a.bench)


if __name__ == "__main__":
    main()
