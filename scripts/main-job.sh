#!/usr/bin/env bash
# The main job behind `make run`. For now: build a model and print its summary. The scheduler
# and executor stages extend this into profile -> schedule -> run.
set -euo pipefail
BUILD_DIR=${1:-build}
HIOS="$BUILD_DIR/cli/hios"
MODEL=${MODEL:-inception_v3}
SIZE=${SIZE:-299}
mkdir -p output
"$HIOS" graph --model "$MODEL" --height "$SIZE" --width "$SIZE" -o "output/$MODEL-$SIZE.json"
"$HIOS" info "output/$MODEL-$SIZE.json"
