# The start both importer shell tests share (sourced, not run): strict mode, the hios binary as
# an absolute path (H, from $1), mpirun (MPIRUN, from $2), a work folder removed on exit (W), a
# failure counter with fail(), and a python3 with onnx and numpy (PY).
set -uo pipefail
H=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIRUN=${2:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
PY=
for p in python3 /usr/bin/python3; do
  if "$p" -c "import onnx, numpy" 2>/dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || { echo "FAIL: no python3 with the onnx and numpy packages (scripts/install-deps.sh installs python3-onnx)"; exit 1; }
