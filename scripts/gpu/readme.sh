#!/usr/bin/env bash
# The README's commands on a GPU machine, as a new user types them: `make run` first (it
# installs, builds and runs the main job), then every command of the README's "A short tour"
# block in order, read from README.md itself (continued lines joined, comment lines skipped),
# from the repository root with PATH set as the README says. Each command's line, exit status,
# seconds and last lines of output go to $OUT/readme.log; a summary table ends it.
#
#   OUT=/some/dir bash scripts/gpu.sh readme
#   OUT=/some/dir SKIP='hios serve' bash scripts/gpu.sh readme        # everything but serving
#   OUT=/some/dir ONLY='hios serve --backend cuda --devices' MAKE_RUN=0 bash scripts/gpu.sh readme
#
# Environment: ONLY / SKIP (extended regular expressions on the command line: run only the
# matching commands / leave the matching ones out), MAKE_RUN (1: run `make run` first), JOBS
# (make's jobs, 16), STEP_TIMEOUT (300 s per command), LIST=1 (print the commands and stop).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/output/gpu-readme}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0

# The commands of the "A short tour" and "Your own model" blocks, each ended by a NUL: a line
# ending in "\" continues, and a here-document stays one command, its lines kept.
tour_commands() {
  python3 - "$ROOT/README.md" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
joined = []
for section in ("## A short tour", "## Your own model"):
    start = text.index(section)
    block = text[text.index("```sh\n", start) + 6:]
    block = block[:block.index("```")]
    cmd, heredoc = "", None
    for line in block.splitlines():
        if heredoc is not None:
            cmd += "\n" + line
            if line.strip() == heredoc:
                joined.append(cmd)
                cmd, heredoc = "", None
            continue
        if cmd:
            cmd += " " + line.strip()
        elif line.strip() and not line.lstrip().startswith("#"):
            cmd = line.strip()
        else:
            continue
        m = re.search(r"<<'?(\w+)'?\s*$", cmd)
        if m:
            heredoc = m.group(1)
            continue
        if cmd.endswith("\\"):
            cmd = cmd[:-1].rstrip()
            continue
        joined.append(cmd)
        cmd = ""
sys.stdout.write("".join(c + "\0" for c in joined))
EOF
}

mapfile -d '' -t COMMANDS < <(tour_commands)
selected=()
for c in "${COMMANDS[@]}"; do
  [[ -n "${ONLY:-}" && ! "$c" =~ ${ONLY} ]] && continue
  [[ -n "${SKIP:-}" && "$c" =~ ${SKIP} ]] && continue
  selected+=("$c")
done
if [[ "${LIST:-0}" == 1 ]]; then printf '%s\n' "${selected[@]}"; exit 0; fi

exec > >(tee "$OUT/readme.log") 2>&1
t0=$(date +%s)
summary=()
step() {  # COMMAND: run it as typed, record its status and time
  echo; echo "\$ $1"
  local s=$(date +%s)
  timeout "${STEP_TIMEOUT:-300}" bash -c "$1" >"$OUT/step.out" 2>&1
  local rc=$? secs=$(( $(date +%s) - s ))
  tail -n 12 "$OUT/step.out"
  echo "[rc $rc, $secs s]"
  local line=${1//$'\n'/ }
  summary+=("$(printf '%3d %5d s  %s' "$rc" "$secs" "${line:0:150}")")
}
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
if [[ "${MAKE_RUN:-1}" == 1 ]]; then step "make run JOBS=${JOBS:-16}"; fi
export PATH=$ROOT/build/cli:$PATH
for c in "${selected[@]}"; do step "$c"; done
rm -f "$OUT/step.out"
echo
echo "rc  time      command"
printf '%s\n' "${summary[@]}"
echo "total $(( $(date +%s) - t0 )) s"
