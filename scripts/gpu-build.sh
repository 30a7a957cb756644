#!/usr/bin/env bash
# The build step every one-call GPU script shares (sourced, not run):
#
#   source scripts/gpu-build.sh
#   gpu_build hios test_gpu        # configures and builds these targets in $B, log in $OUT/build.log
#
# Release, Hopper (sm_90), CUDA backend on; JOBS parallel jobs (default 16). On failure it prints
# the log's last 40 lines and exits the calling script with 1; otherwise "build: N s".
gpu_build() {
  local start
  start=$(date +%s)
  { cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DHIOS_CUDA=ON &&
    cmake --build "$B" -j "${JOBS:-16}" --target "$@"; } >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
  echo "build: $(( $(date +%s) - start )) s"
}
