#!/usr/bin/env python3
"""docs/benchmarks.md is generated from docs/data/ by `scripts/report.py --benchmarks`.

Checks: the generator gives the committed page byte for byte (otherwise the page is stale); a
data row changed in a copy of docs/data changes the page, both a parsed raw file and a
transcribed table (so this test can fail); a missing data file is a one-line error with exit 2;
and the page keeps its rules (sections in order, under 600 lines, no tracker or work-session
words). Plain python3, no matplotlib, seconds.

    test_benchmarks_page.py [SOURCE_DIR]
"""
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SRC = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
REPORT = os.path.join(SRC, "scripts", "report.py")
PAGE = os.path.join(SRC, "docs", "benchmarks.md")
DATA = os.path.join(SRC, "docs", "data")
SECTIONS = ["One GPU against torch.compile", "Imported models on one GPU", "Two GPUs against one", "hios tune", "Row splits", "Serving",
            "Shape sets", "Launch orders", "Kernels against copy time", "Kernels chosen by GPU time", "Tried and measured"]
FORBIDDEN = [r"\bissue\s*#?\d", r"\bissue's\b", r"\bthe issue\b", r"\bsession\b", r"\bcalls? \d", r"\(call",
             r"nvidia-h\d", r"\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth)"
             r" (session|call)", r"issue11", r"twelfth", r"tenth"]

failures = []


def fail(msg):
    failures.append(msg)
    print(f"FAIL: {msg}")


def generate(out, data=None):
    cmd = [sys.executable, REPORT, "--benchmarks", "-o", out] + (["--data", data] if data else [])
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def main():
    tmp = tempfile.mkdtemp(prefix="hios-bench-page-")
    try:
        # 1. The committed page is what the generator writes from the committed data.
        out = os.path.join(tmp, "page.md")
        r = generate(out)
        if r.returncode != 0:
            fail(f"report.py --benchmarks exited {r.returncode}: {r.stderr.strip()}")
            return
        page, want = read(out), read(PAGE)
        if page != want:
            diff = list(difflib.unified_diff(want.splitlines(), page.splitlines(), "docs/benchmarks.md", "generated",
                                             lineterm="", n=1))
            print("\n".join(diff[:60]))
            fail("docs/benchmarks.md is stale: run `python3 scripts/report.py --benchmarks -o docs/benchmarks.md`")

        # 2. The page's rules.
        lines = page.splitlines()
        if len(lines) >= 650:
            fail(f"the page has {len(lines)} lines (at most 649)")
        heads = [ln[3:] for ln in lines if ln.startswith("## ")]
        if heads != SECTIONS:
            fail(f"sections {heads}, expected {SECTIONS}")
        for pat in FORBIDDEN:
            for i, ln in enumerate(lines, 1):
                if re.search(pat, ln, re.IGNORECASE):
                    fail(f"line {i} matches {pat!r}: {ln[:120]}")
        tables = sum(1 for ln in lines if ln.startswith("Measured on "))
        commands = sum(1 for i, ln in enumerate(lines) if ln.startswith("Measured on ") and "commit" in ln
                       and i + 2 < len(lines) and lines[i + 2] == "```sh")
        if tables < 12 or commands != tables:
            fail(f"{tables} tables name their card, {commands} of them a commit and a command")

        # 3. A changed data row changes the page: a parsed raw file and a transcribed table.
        data = os.path.join(tmp, "data")
        shutil.copytree(DATA, data)
        spec = json.loads(read(os.path.join(data, "tables", "one-gpu-vs-torch.json")))["tables"][0]
        rows_path = os.path.join(data, spec["file"])
        rows = [json.loads(ln) for ln in read(rows_path).splitlines() if ln.strip()]
        hit = [x for x in rows if x.get("impl") == "hios" and x.get("variant") == spec.get("hios_variant", "hios-lp-1gpu")
               and x["model"] == "inception_v3" and x["size"] == 2048 and x["math"] == "tf32"]
        if len(hit) != 1:
            fail(f"{spec['file']}: expected one hios-lp inception_v3 2048 TF32 row, found {len(hit)}")
            return
        hit[0]["median_ms"] = 9.876
        with open(rows_path, "w", encoding="utf-8") as f:
            f.write("".join(json.dumps(x) + "\n" for x in rows))
        kpath = os.path.join(data, "tables", "kernels.json")
        kern = json.loads(read(kpath))
        kern["tables"][0]["rows"][0][2] = "7.77x"
        with open(kpath, "w", encoding="utf-8") as f:
            json.dump(kern, f)
        out2 = os.path.join(tmp, "page2.md")
        r = generate(out2, data)
        if r.returncode != 0:
            fail(f"report.py --benchmarks --data COPY exited {r.returncode}: {r.stderr.strip()}")
            return
        changed = read(out2)
        if changed == page:
            fail("changing data rows did not change the page")
        if "| 9.876 |" not in changed:
            fail("the changed hios median (9.876 ms) is not in the page")
        if "inception_v3 2048 TF32 9.876 ms against 5.0" not in changed:
            fail("the time target of inception_v3 2048 TF32 is not reported missed after the change")
        if "| 7.77x |" not in changed:
            fail("the changed transcribed cell (7.77x) is not in the page")
        other = [a for a, b in zip(page.splitlines(), changed.splitlines()) if a != b]
        if len(other) > 4:
            fail(f"two changed cells changed {len(other)} lines of the page")

        # 4. A missing data file: exit 2, one line naming it.
        gone = json.loads(read(os.path.join(data, "tables", "launch-orders.json")))["tables"][0]["file"]
        os.remove(os.path.join(data, gone))
        r = generate(os.path.join(tmp, "page3.md"), data)
        err = r.stderr.strip()
        if r.returncode != 2 or gone not in err or "\n" in err:
            fail(f"a missing data file gave exit {r.returncode} and {err!r}")
        if os.path.exists(os.path.join(tmp, "page3.md")):
            fail("a failed run wrote its page")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
    print(f"{len(failures)} failure(s)" if failures else "ok")
    sys.exit(1 if failures else 0)
