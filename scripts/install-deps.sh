#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages hios builds and tests against. Idempotent: each
# dependency is checked by what the build actually uses (a header, a CMake package, a
# command), so nothing is installed twice and a machine that already has everything -- the GPU
# machine, which has no network -- never calls apt. Works as root or through sudo.
set -euo pipefail

missing=()
need() {  # need PACKAGE TEST...
  local pkg=$1
  shift
  if ! "$@" >/dev/null 2>&1; then missing+=("$pkg"); fi
}
have_file() { for f in "$@"; do [ -e "$f" ] && return 0; done; return 1; }

need cmake          command -v cmake
need g++            command -v g++
need make           command -v make
need openmpi-bin    command -v mpirun
need libopenmpi-dev have_file /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h /usr/include/mpi.h /usr/lib/aarch64-linux-gnu/openmpi/include/mpi.h
need nlohmann-json3-dev have_file /usr/include/nlohmann/json.hpp
need libcli11-dev   have_file /usr/include/CLI/CLI.hpp
need catch2         have_file /usr/lib/cmake/Catch2/Catch2Config.cmake /usr/lib/x86_64-linux-gnu/cmake/Catch2/Catch2Config.cmake /usr/share/cmake/Catch2/Catch2Config.cmake
need python3        command -v python3
required=("${missing[@]}")

# Optional: `hios import` (ONNX models) and its tests, matplotlib for scripts/report.py's
# plots, and scipy for scripts/preset_refit.py. A machine that lacks them and cannot install them (no network) builds hios without
# the importer (it says so at `hios import`) and reports in text only.
missing=()
python_has() { /usr/bin/python3 -c "import $1" || python3 -c "import $1"; }
need python3-matplotlib python_has matplotlib
need python3-scipy   python_has scipy
need libonnx-dev     have_file /usr/include/onnx/onnx-ml.pb.h
need libprotobuf-dev have_file /usr/include/google/protobuf/message.h
need python3-onnx    python_has onnx
optional=("${missing[@]}")
missing=("${required[@]}")

if [ ${#missing[@]} -eq 0 ] && [ ${#optional[@]} -eq 0 ]; then
  echo "install-deps: all dependencies present"
  exit 0
fi
if [ ${#missing[@]} -eq 0 ] && ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: no apt-get here; going on without ${optional[*]}"
  exit 0
fi

if [ ${#missing[@]} -eq 0 ]; then  # only optional packages: try, and go on without them
  online() { timeout 5 getent hosts deb.debian.org || timeout 5 getent hosts archive.ubuntu.com; } >/dev/null 2>&1
  if ! online; then
    echo "install-deps: offline; going on without ${optional[*]}"
    exit 0
  fi
  SUDO=""; [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && SUDO="sudo"
  echo "install-deps: installing ${optional[*]}"
  if DEBIAN_FRONTEND=noninteractive timeout 600 $SUDO apt-get install -y -qq --no-install-recommends "${optional[@]}" ||
     { timeout 60 $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 600 $SUDO apt-get install -y -qq \
         --no-install-recommends "${optional[@]}"; }; then
    echo "install-deps: done"
  else
    echo "install-deps: could not install ${optional[*]}; going on without them"
  fi
  exit 0
fi
missing+=("${optional[@]}")
echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
