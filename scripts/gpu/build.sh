#!/usr/bin/env bash
# The build step every one-call GPU script shares (sourced, not run):
#
#   source scripts/gpu/build.sh
#   gpu_build hios test_gpu        # configures and builds these targets in $B, log in $OUT/build.log
#
# Release, Hopper (sm_90), CUDA backend on; JOBS parallel jobs (default 16). On failure it prints
# the log's last 40 lines and exits the calling script with 1; otherwise "build: N s".
# A machine without Debian's libonnx-dev and libprotobuf-dev gets `hios import` from a copy of
# their headers and libraries in .deps/onnx (include/, lib/), when one travels with the tree.
gpu_build() {
  local start extra=()
  start=$(date +%s)
  [ -d .deps/onnx/lib ] && extra+=("-DCMAKE_PREFIX_PATH=$PWD/.deps/onnx")
  { cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DHIOS_CUDA=ON "${extra[@]}" &&
    cmake --build "$B" -j "${JOBS:-16}" --target "$@"; } >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
  echo "build: $(( $(date +%s) - start )) s"
}

# The hios binary in $B (built when missing or when REBUILD is set) as $H, and the machine's
# GPUs, commit and time in $OUT/env.txt: the start of every one-call script that runs hios only.
gpu_hios_and_env() {
  [ -x "$B/cli/hios" ] && [ -z "${REBUILD:-}" ] || JOBS=${JOBS:-32} gpu_build hios
  H=$B/cli/hios
  { nvidia-smi --query-gpu=index,name,driver_version --format=csv; git rev-parse --short HEAD; date -u +%FT%TZ; } >"$OUT/env.txt" 2>&1
}
