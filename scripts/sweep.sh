#!/usr/bin/env bash
# scripts/sweep.sh SPEC -o RESULTS.jsonl [options]: the same as scripts/sweep.py (docs/experiments.md).
exec python3 "$(dirname "$0")/sweep.py" "$@"
