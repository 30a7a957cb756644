#!/usr/bin/env python3
"""Replays exported ONNX backend cases on a hios backend and compares them with the expected outputs.

scripts/onnx_conformance.py --export DIR writes every case that passes on the CPU backend as
DIR/<case>/ (the imported graph and weights, its inputs, the expected outputs, case.json). This
script needs only NumPy and the hios binary, so it runs where the importer is not built (a GPU
machine without ONNX's headers):

    python3 scripts/replay_cases.py DIR --backend cuda --math fp32 --jobs 8
    python3 scripts/replay_cases.py DIR --backend cpu --cases 'resize' -v

With --task (trained models, scripts/trained_cases.py), an output passes when max |difference| /
max |expected| is within TASK_LIMITS of the math mode; in bf16 and fp16, also when the task agrees
as case.json's "task" says: {"kind": "mask", "threshold": T} (every output thresholded at T, IoU
of the masks at least 0.98) or {"kind": "argmax", "axis": A} (the same argmax everywhere).

Each case ends as pass, refused (hios declined it with exit code 2: the one line is the reason),
wrong, crash or timeout, as in onnx_conformance.py. --json writes one row per case; --markdown a
page with the totals and the refusals by reason. The exit code is 1 when any case is wrong or
crashed, else 0.
"""
import argparse
import collections
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_conformance import compare, error_line, last_line, signal_name, write_text  # noqa: E402

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# Relative and absolute tolerances per math mode: the GPU's fp32 functions differ from the host's
# by a few ulps; TF32 and the 16-bit types round products and storage.
TOLERANCES = {"fp32": (1e-3, 1e-5), "tf32": (5e-3, 1e-3), "bf16": (5e-2, 5e-2), "fp16": (1e-2, 1e-2)}
# --task: the largest max |difference| / max |expected| a trained model's output may show, and the
# IoU its thresholded masks must reach where the limit does not hold (16-bit modes only).
TASK_LIMITS = {"fp32": 1e-4, "tf32": 1e-2}
MASK_IOU = 0.98


def task_check(got, want, task):
    """(agrees, text) of the task given in case.json on one output."""
    if task["kind"] == "mask":
        a, b = got > task["threshold"], want > task["threshold"]
        union = int(np.sum(a | b))
        iou = 1.0 if union == 0 else int(np.sum(a & b)) / union
        return iou >= MASK_IOU, f"mask IoU {iou:.4f} ({int(np.sum(a))} / {int(np.sum(b))} px)"
    if task["kind"] == "argmax":
        same = np.mean(np.argmax(got, axis=task["axis"]) == np.argmax(want, axis=task["axis"]))
        return bool(same == 1.0), f"argmax {same * 100:.2f}% the same"
    raise ValueError(f"unknown task kind {task['kind']!r}")


def relative_error(got, want):
    scale = float(np.max(np.abs(want))) or 1.0
    return float(np.max(np.abs(got.astype(np.float64).reshape(want.shape) - want))) / scale


def replay(case_dir, hios, backend, math, timeout, rtol, atol, task_mode=False):
    with open(os.path.join(case_dir, "case.json")) as f:
        spec = json.load(f)
    row = {"case": os.path.basename(case_dir), "status": None, "reason": "", "max_abs_err": None}
    with tempfile.TemporaryDirectory(prefix="replay.") as out:
        args = [hios, "run", "--graph", os.path.join(case_dir, spec["graph"]), "--backend", backend]
        if spec.get("schedule"):
            args += ["--schedule", os.path.join(case_dir, spec["schedule"])]
        if math:
            args += ["--math", math]
        for name, file in spec["inputs"]:
            args += ["--input", f"{name}={os.path.join(case_dir, file)}"]
        args += ["--save-output", out]
        try:
            p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            row.update(status="timeout", reason=f"ran past {timeout:g} s")
            return row
        if p.returncode == 2:
            row.update(status="refused", reason=error_line(p.stderr).replace(case_dir + os.sep, ""))
            return row
        if p.returncode != 0:
            what = signal_name(p.returncode) if p.returncode < 0 else f"exit {p.returncode}"
            row.update(status="crash", reason=f"{what}: {last_line(p.stderr)}")
            return row
        worst = None
        notes = []
        for name, saved, expected in spec["outputs"]:
            path = os.path.join(out, saved)
            if not os.path.isfile(path):
                row.update(status="wrong", reason=f"output '{name}' not written")
                return row
            if task_mode:
                got, want = np.load(path, allow_pickle=False), np.load(os.path.join(case_dir, expected))
                rel = relative_error(got, want)
                row["max_rel"] = max(row.get("max_rel", 0.0), rel)
                limit = TASK_LIMITS.get(math or "fp32")
                if limit is not None and rel <= limit:
                    continue
                if limit is None and spec.get("task"):
                    agrees, text = task_check(got, want, spec["task"])
                    notes.append(f"{name}: {text}")
                    if agrees:
                        continue
                    row.update(status="wrong", reason=f"output '{name}': max rel {rel:.3g}, {text}")
                    return row
                row.update(status="wrong", reason=f"output '{name}': max rel {rel:.3g} above {limit or 0:g}")
                return row
            ok, why, err = compare(np.load(path, allow_pickle=False), np.load(os.path.join(case_dir, expected)),
                                   rtol=rtol, atol=atol)
            if err is not None:
                worst = err if worst is None else max(worst, err)
            if not ok:
                row.update(status="wrong", reason=f"output '{name}': {why}", max_abs_err=worst)
                return row
        row.update(status="pass", max_abs_err=worst)
        if task_mode:
            row["reason"] = f"max rel {row.get('max_rel', 0.0):.3g}" + "".join(f"; {n}" for n in notes[:3])
        return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help="a folder of exported cases (onnx_conformance.py --export)")
    ap.add_argument("--hios", default=os.environ.get("HIOS", os.path.join(REPO, "build", "cli", "hios")))
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--math", default=None, help="fp32, tf32, bf16 or fp16 (default: the backend's)")
    ap.add_argument("--cases", help="only cases whose name contains this text")
    ap.add_argument("--jobs", "-j", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--rtol", type=float)
    ap.add_argument("--atol", type=float)
    ap.add_argument("--json", help="per-case results")
    ap.add_argument("--markdown", help="a page with the totals and the refusals by reason")
    ap.add_argument("--task", action="store_true",
                    help="trained models: max rel error per math mode, the task's agreement in 16-bit modes")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    if not os.path.isdir(args.dir):
        ap.error(f"{args.dir}: not a folder")
    cases = sorted(c for c in os.listdir(args.dir) if os.path.isfile(os.path.join(args.dir, c, "case.json")))
    if args.cases:
        cases = [c for c in cases if args.cases in c]
    if not cases:
        ap.error(f"{args.dir}: no exported cases" + (f" containing {args.cases!r}" if args.cases else ""))
    rtol, atol = TOLERANCES.get(args.math or "fp32", TOLERANCES["fp32"])
    rtol = args.rtol if args.rtol is not None else rtol
    atol = args.atol if args.atol is not None else atol
    start = time.time()
    rows = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(replay, os.path.join(args.dir, c), os.path.abspath(args.hios), args.backend, args.math,
                               args.timeout, rtol, atol, args.task) for c in cases]
        for fut in concurrent.futures.as_completed(futures):
            row = fut.result()
            rows.append(row)
            if args.verbose:
                print(f"{row['case']}: {row['status']} {row['reason']}".rstrip(), file=sys.stderr, flush=True)
    rows.sort(key=lambda r: r["case"])
    counts = collections.Counter(r["status"] for r in rows)
    order = ("pass", "refused", "wrong", "crash", "timeout")
    line = " / ".join(f"{counts.get(s, 0)} {s}" for s in order) + f" of {len(rows)}"
    label = f"{args.backend}" + (f" --math {args.math}" if args.math else "")
    print(f"replayed on {label}: {line} ({time.time() - start:.0f} s; rtol {rtol:g}, atol {atol:g})")
    reasons = collections.Counter(r["reason"] for r in rows if r["status"] == "refused")
    for reason, n in reasons.most_common(8):
        print(f"  refused {n:4d}: {reason[:120]}")
    for r in rows:
        if args.task and r["status"] == "pass":
            print(f"  pass: {r['case']}: {r['reason']}")
        if r["status"] in ("wrong", "crash", "timeout"):
            print(f"  {r['status']}: {r['case']}: {r['reason']}")
    if args.json:
        write_text(args.json, json.dumps({"backend": args.backend, "math": args.math, "rtol": rtol, "atol": atol,
                                          "totals": {s: counts.get(s, 0) for s in order}, "cases": rows},
                                         indent=1) + "\n")
    if args.markdown:
        lines = [f"# ONNX backend cases replayed on {label}", "",
                 f"{line}; outputs compared with rtol {rtol:g}, atol {atol:g}.", "",
                 "| refused | reason |", "|---:|---|"]
        lines += [f"| {n} | {reason.replace('|', '/')} |" for reason, n in reasons.most_common()]
        bad = [r for r in rows if r["status"] in ("wrong", "crash", "timeout")]
        if bad:
            lines += ["", "| case | status | reason |", "|---|---|---|"]
            lines += [f"| {r['case']} | {r['status']} | {r['reason'].replace('|', '/')} |" for r in bad]
        write_text(args.markdown, "\n".join(lines) + "\n")
    return 1 if counts.get("wrong", 0) or counts.get("crash", 0) else 0


if __name__ == "__main__":
    sys.exit(main())
