#!/usr/bin/env bash
# One device call on a two-GPU machine: build hios into build/ (as `make` leaves it, with
# `hios import`), then run every two-GPU command of the README's "A short tour" and "Your own
# model" blocks as written, with the commands they read from before them, through
# scripts/gpu-readme.sh. The log is $OUT/readme.log. Serving has its own script
# (scripts/gpu-serve-scaling.sh runs the README's two-GPU serving command).
#   OUT=/some/dir bash scripts/gpu-readme-two-gpus.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/output/gpu-readme}
mkdir -p "$OUT"
B=build
source scripts/gpu-build.sh
JOBS=${JOBS:-32} gpu_build hios
ONLY='^hios graph --model inception_v3 --height|--gpus 2 --cost analytic|^hios profile|^hios fit-preset|--device mine|--cost prof.json|^mpirun -np 2 hios (run|tune) --graph (inception|resnet50)|^python3 - |^hios import' \
  MAKE_RUN=0 OUT=$OUT bash scripts/gpu-readme.sh
