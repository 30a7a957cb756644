#!/usr/bin/env python3
"""Resumable experiment sweeps over model x image size x batch x GPUs x algorithm.

    scripts/sweep.py SPEC.json -o RESULTS.jsonl [--hios PATH] [--workdir DIR] [--only PATTERN]
                     [--dry-run] [--retry-failed]

Every configuration of the spec runs the real pipeline through the hios binary:

    hios graph --model M --height H --width W --batch B -o graph.json        (once per graph;
                                   a model "x.onnx" is `hios import x.onnx ...` from the spec's folder)
    hios schedule --graph graph.json --algo A --gpus G --cost C ... -o schedule.json
      or  mpirun -np G hios tune ... -o schedule.json                      (algorithm "tuned")
    mpirun -np G hios run --graph graph.json --schedule schedule.json --backend ... --verify -o run.json

and appends one JSON line to RESULTS: the configuration, its key, ok/failed/timeout, the
error, the measured numbers and the environment. A key already in RESULTS is skipped, so the
same command resumes an interrupted sweep. Each line is appended with one write() and fsync'ed:
Ctrl-C, SIGTERM or SIGKILL leave every earlier line whole, and a partial last line (a kill in
the middle of the write, or a full disk) is cut off on the next start.

docs/experiments.md describes the spec, the presets in scripts/sweeps/ and the row format.
Exit status: 0 when every configuration run now is ok, 1 when one failed or timed out (the
sweep still ran the others), 2 for a bad spec or option, 130/143 when interrupted.
"""
import argparse
import os
import platform
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time

# The modules beside this file; found also where Python does not put the script's folder on the path.
_HERE = os.path.dirname(os.path.realpath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from sweep_jobs import Paths, Runner, plan
from sweep_results import Results, _finite, run_config
from sweep_spec import PROG, SpecError, digest, expand, key_selected, load_spec

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Interrupted(Exception):
    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# ----------------------------------------------------------------------------------------------
# Environment
# ----------------------------------------------------------------------------------------------

def _capture(argv, timeout=20):
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return r.stdout.strip() if r.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def environment(hios, spec):
    commit = _capture(["git", "-C", REPO, "rev-parse", "HEAD"])
    dirty = _capture(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"])
    gpus = _capture(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]) if shutil.which("nvidia-smi") else None
    mpi = _capture([spec["mpirun"]["command"], "--version"])
    return {"host": socket.gethostname(), "commit": commit or "unknown",
            "commit_dirty": bool(dirty) if dirty is not None else None,
            "gpus": [g.strip() for g in gpus.splitlines() if g.strip()] if gpus else [],
            "mpirun": mpi.splitlines()[0] if mpi else None,
            "python": platform.python_version(), "hios": os.path.abspath(hios)}


def fmt_s(s):
    s = int(round(s))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def pytorch_skip_reason(c, state):
    """Why a PyTorch configuration cannot run here (None: it can). A skipped configuration gets
    no row, so a later sweep on a machine with PyTorch fills it in."""
    if not state["script"]:
        return "scripts/bench_pytorch.py not found"
    if state["torch"] is None:
        ok = _capture([sys.executable, "-c", "import torch"], timeout=300)
        state["torch"] = ok is not None
        help_text = _capture([sys.executable, state["script"], "--help"], timeout=60) or ""
        state["batch"] = "--batch" in help_text
    if not state["torch"]:
        return "PyTorch does not import"
    if c["height"] != c["width"]:
        return "bench_pytorch.py takes square sizes only"
    if c["batch"] != 1 and not state["batch"]:
        return "bench_pytorch.py has no --batch"
    return None


# ----------------------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="docs/experiments.md has the spec format, the presets and the row format.")
    ap.add_argument("spec", help="sweep spec (JSON), e.g. scripts/sweeps/smoke-cpu.json")
    ap.add_argument("-o", "--output", required=True, help="results file (JSON lines), appended to")
    ap.add_argument("--hios", default=os.environ.get("HIOS", os.path.join(REPO, "build", "cli", "hios")),
                    help="the hios binary (default: $HIOS or build/cli/hios)")
    ap.add_argument("--workdir", help="graphs, schedules, cost databases, run results and logs "
                                      "(default: RESULTS without .jsonl, plus .work)")
    ap.add_argument("--only", action="append", default=[], metavar="PATTERN",
                    help="run only keys matching PATTERN (a glob with * ? [ ], else a substring); repeatable")
    ap.add_argument("--dry-run", action="store_true", help="list the configurations and their commands, run nothing")
    ap.add_argument("--retry-failed", action="store_true", help="run again the keys whose last row is not ok")
    args = ap.parse_args(argv)

    try:
        spec = load_spec(args.spec)
        try:
            configs = expand(spec)
        except SpecError as e:
            raise SpecError(f"{args.spec}: {e}") from None
        configs = [c for c in configs if key_selected(c["key"], args.only)]
        if not configs:
            raise SpecError(f"no configuration matches --only {' '.join(args.only)}")
        out = args.output
        work = args.workdir or (out[:-6] if out.endswith(".jsonl") else out) + ".work"
        if os.path.exists(work) and not os.path.isdir(work):
            raise SpecError(f"{work}: exists and is not a folder (--workdir)")
        hios = args.hios
        if not args.dry_run:
            if not (os.path.isfile(hios) and os.access(hios, os.X_OK)):
                raise SpecError(f"{hios}: no hios binary there; build it (make) or pass --hios PATH")
            if not shutil.which(spec["mpirun"]["command"]):
                raise SpecError(f"mpirun.command: '{spec['mpirun']['command']}' not found on PATH")
        results = Results(out, write=not args.dry_run)
    except SpecError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2

    done = results.done(args.retry_failed)
    todo = [c for c in configs if c["key"] not in done]
    # A key names the axes, not the options (schedule, run, tune); rows made with other options
    # are still skipped, but say so.
    digests = {r["key"]: (r.get("sweep") or {}).get("settings_digest") for r in results.rows}
    other = [c["key"] for c in configs if c["key"] in done and digests.get(c["key"]) != digest(c["settings"])]
    bench = os.path.join(REPO, "scripts", "bench_pytorch.py")
    pt_state = {"script": bench if os.path.isfile(bench) else None, "torch": None, "batch": False}
    if results.repaired and not args.dry_run:
        print(f"{PROG}: cut a partial last line ({results.repaired} bytes) off {out}", flush=True)
    print(f"sweep {spec['name']}: {len(configs)} configuration(s), {len(configs) - len(todo)} already in {out}, "
          f"{len(todo)} to run; work dir {work}", flush=True)

    if other:
        print(f"{PROG}: note: {len(other)} configuration(s) in {out} were run with other schedule/run/tune "
              f"options (e.g. {other[0]}); they are kept: use another results file to run them with these", flush=True)
    if args.dry_run:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `--dry-run | head` ends quietly
        todo_keys = {c["key"] for c in todo}
        for k, c in enumerate(configs, 1):
            state = "todo" if c["key"] in todo_keys else "done"
            print(f"[{k}/{len(configs)}] {c['key']}  {state}")
            for step in plan(spec, hios, c, Paths(work, c), bench):
                print(f"    {shlex.join(step.argv)}" + ("    (once: skipped when the file exists)" if step.makes else ""))
        return 0

    env = dict(os.environ)
    env.update(spec["mpirun"]["env"])
    os.makedirs(work, exist_ok=True)
    runner = Runner(work, env)
    runner.clean_leftovers()

    def on_signal(signum, frame):
        raise Interrupted(signum)

    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    env_info = environment(hios, spec)
    counts = {"ok": 0, "failed": 0, "timeout": 0, "skipped": 0}
    t_start = time.monotonic()
    ran, ran_s = 0, 0.0
    current = None
    try:
        for k, c in enumerate(todo, 1):
            current = c["key"]
            t0 = time.monotonic()
            if c["kind"] == "pytorch":
                reason = pytorch_skip_reason(c, pt_state)
                if reason:
                    counts["skipped"] += 1
                    print(f"[{k}/{len(todo)}] {c['key']} ... skipped ({reason}; no row)", flush=True)
                    continue
            row = run_config(spec, hios, c, work, runner, env_info, bench)
            results.append(row)
            counts[row["status"]] += 1
            ran += 1
            ran_s += time.monotonic() - t0
            elapsed = time.monotonic() - t_start
            eta = ran_s / ran * (len(todo) - k)
            if row["status"] == "ok":
                med = row["result"].get("latency_ms", {}).get("median")
                what = f"ok {med:.3f} ms" if _finite(med) else "ok"
            else:
                what = f"{row['status']} ({row.get('step')}: {row.get('error')})"
            print(f"[{k}/{len(todo)}] {c['key']} ... {what}  [{time.monotonic() - t0:.1f} s; "
                  f"elapsed {fmt_s(elapsed)}, ETA {fmt_s(eta)}]", flush=True)
    except (KeyboardInterrupt, Interrupted) as e:
        signum = e.signum if isinstance(e, Interrupted) else signal.SIGINT
        print(f"\n{PROG}: interrupted ({signal.Signals(signum).name}) during {current}: not recorded; "
              f"{out} holds every finished row; run the same command to resume", file=sys.stderr, flush=True)
        return 128 + int(signum)
    print(f"sweep {spec['name']}: {counts['ok']} ok, {counts['failed']} failed, {counts['timeout']} timed out"
          + (f", {counts['skipped']} PyTorch skipped" if counts["skipped"] else "")
          + f" in {fmt_s(time.monotonic() - t_start)}; results in {out}", flush=True)
    return 1 if counts["failed"] or counts["timeout"] else 0


if __name__ == "__main__":
    sys.exit(main())
