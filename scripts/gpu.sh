#!/usr/bin/env bash
# The GPU machine's entry point: one device call runs one or more suites, in order. Words after a
# suite's name that are not suite names are that suite's arguments.
#
#   bash scripts/gpu.sh SUITE [ARG ...] [SUITE [ARG ...] ...]     results under $OUT (default output/gpu)
#
# Suites written here:
#   build   configure and build hios and the GPU tests (Release, sm_90, CUDA on)
#   test    the GPU test suite, `ctest -L gpu`
#   cases   ONNX's backend cases exported by scripts/onnx_conformance.py --export (CASES, default
#           output/conformance-export, or CASES_TAR, a .tar.xz of it) replayed on the CUDA backend
#           in fp32, then in the math modes of CASES_MATH (default "tf32 bf16")
#   trained trained models as exported cases (TRAINED, default output/trained-cases: one folder per
#           model, as scripts/trained_cases.py writes them) replayed in fp32, tf32 and bf16
#   seg     torchvision's segmentation networks (SEG_MODELS) exported with seeded weights on this
#           machine, imported at SEG_SIZES, scheduled (SEG_TUNE=1: `hios tune --gpus 1`, else
#           hios-lp on analytic costs) and timed in SEG_MATH; SEG_TORCH=1 times torch.compile
#           (reduce-overhead, channels_last; TF32 and bf16, or SEG_TORCH_VARIANTS) in the same call; SEG_PROFILE=1 prints
#           each configuration's time per op kind and costliest node signatures (hios profile,
#           scripts/profile_summary.py) and keeps the databases in seg-profiles.tar.xz (with every
#           convolution's timed candidates); SEG_CONV_SEARCH=wide passes --conv-search wide to
#           tune, profile and run. Needs the importer:
#           carry .deps/onnx (scripts/pack-importer-deps.sh) where libonnx-dev is not installed
#   all     build test cases ab
#
# Suites in scripts/gpu/ (each file's head says its arguments and environment; they run alone
# too, `bash scripts/gpu/NAME.sh`):
#   bench          hios against PyTorch, one table (scripts/gpu/bench.sh)
#   table          the one-GPU table against torch.compile, warm caches first (PHASE=warm|table)
#   ab             the built-in models' one-GPU timings against a reference build (REF_TARBALL, a
#                  `git archive` of the reference commit, or REF, a commit), CONFIGS as arguments
#                  (default inception_v3:2048 inception_v3:2048:bf16 nasnet_large:331)
#   tune           hios tune, re-tune and `hios run` per MODEL:SIZE:BATCH[:MATH] argument, two GPUs
#   onnx           models exported from PyTorch, imported, run and compared (MODEL:SIZE:EXPORTER)
#   bert           Hugging Face BERT encoders (BERT_CONFIGS, BERT_SEQS, BERT_MATH): exported, imported,
#                  run with their int64 ids and mask against PyTorch, torch.compile timed
#   torch-check    hios's inception_v3 against PyTorch's with the same weights
#   serve, serve-scaling   hios serve on one GPU; on one and two GPUs with replicas
#   shapes         shape sets: many input shapes from one process
#   sweep          a sweep preset (scripts/sweeps/) and its report
#   kernels        per-kernel timings against copy time, hios and PyTorch
#   launch-order   topo, opara and measured launch orders
#   split-probe    row-split candidates on two GPUs, their bands and halos timed
#   profile        hios profile, then schedules on analytic against profiled costs
#   analytic       the analytic cost model's predictions against runs
#   preset-fit, presets    device presets fitted to measurements
#   readme         the README's commands as a new user types them (MAKE_RUN=0 skips make run)
#
# Every suite builds what it needs first. Environment: OUT, BUILD_DIR (/tmp/b), JOBS (16).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/output/gpu}
B=${BUILD_DIR:-/tmp/b}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source scripts/gpu/build.sh
start=$(date +%s)
built=

need_build() {
  [ -n "$built" ] && return
  gpu_build hios test_gpu
  { nvidia-smi --query-gpu=index,name,driver_version --format=csv; git rev-parse --short HEAD 2>/dev/null;
    echo "changes: $(git status --short 2>/dev/null | wc -l) files"; date -u +%FT%TZ; } >"$OUT/env.txt" 2>&1
  built=1
}

suite_test() {
  need_build
  (cd "$B" && timeout "${CTEST_S:-330}" ctest -L gpu -j "${PARALLEL:-4}" --timeout 300 --output-on-failure) \
    >"$OUT/ctest-gpu.log" 2>&1
  echo "test: $(grep -E 'tests passed|tests failed' "$OUT/ctest-gpu.log" | tail -1)"
  grep -E "\*\*\*|Failed  " "$OUT/ctest-gpu.log" | head -20
}

suite_cases() {
  need_build
  local dir=${CASES:-output/conformance-export}
  if [ -n "${CASES_TAR:-}" ]; then
    dir=/tmp/conformance-export
    rm -rf "$dir" && mkdir -p "$dir" && tar -xJf "$CASES_TAR" -C "$dir" --strip-components=1 || { echo "cases: cannot extract $CASES_TAR"; return; }
  fi
  [ -d "$dir" ] || { echo "cases: no exported cases in $dir (scripts/onnx_conformance.py --export)"; return; }
  for math in fp32 ${CASES_MATH-tf32 bf16}; do
    python3 scripts/replay_cases.py "$dir" --hios "$B/cli/hios" --backend cuda --math "$math" --jobs "${CASES_JOBS:-8}" \
      --json "$OUT/cases-$math.json" --markdown "$OUT/cases-$math.md" >"$OUT/cases-$math.log" 2>&1
    head -n 14 "$OUT/cases-$math.log"
  done
}

suite_trained() {
  need_build
  local dir=${TRAINED:-output/trained-cases}
  [ -d "$dir" ] || { echo "trained: no cases in $dir (scripts/trained_cases.py)"; return; }
  for math in fp32 tf32 bf16; do
    python3 scripts/replay_cases.py "$dir" --hios "$B/cli/hios" --backend cuda --math "$math" --jobs 1 --timeout 300 \
      --task --json "$OUT/trained-$math.json" >"$OUT/trained-$math.log" 2>&1
    cat "$OUT/trained-$math.log"
  done
}

suite_seg() {
  need_build
  grep -q "ONNX=ON" "$OUT/build.log" 2>/dev/null || grep -q "HIOS_WITH_IMPORTER" "$B/cli/CMakeFiles/hios.dir/flags.make" 2>/dev/null ||
    { echo "seg: this hios has no importer (carry .deps/onnx: scripts/pack-importer-deps.sh)"; return; }
  local w=/tmp/seg models=${SEG_MODELS:-lraspp_mobilenet_v3_large deeplabv3_resnet50 fcn_resnet50}
  local t=$OUT/seg.txt search=${SEG_CONV_SEARCH:+--conv-search $SEG_CONV_SEARCH}
  mkdir -p "$w"
  : >"$t"
  # One export per size: with a fixed input shape the exporters fold the shape arithmetic of
  # the upsampling into constants, so a file exported at one size imports at that size only.
  for m in $models; do
    for size in ${SEG_SIZES:-1024 2048}; do
      local d=$w/$m-$size g=$w/$m-$size/g.json
      python3 scripts/torch_onnx_export.py --model "$m" --size "$size" --exporter "${SEG_EXPORTER:-legacy}" --out "$d" \
        >"$d.export.log" 2>&1 || { echo "$m $size: export failed: $(tail -1 "$d.export.log")" | tee -a "$t"; continue; }
      "$B/cli/hios" import "$d/model.onnx" -o "$g" >"$d.import.log" 2>&1 ||
        { echo "$m $size: import refused: $(grep -m1 error "$d.import.log")" | tee -a "$t"; continue; }
      for math in ${SEG_MATH:-tf32 bf16}; do
        local s=$d/s-$math.json how=hios-lp
        if [ -n "${SEG_TUNE:-}" ]; then
          how=tuned
          timeout 300 "$B/cli/hios" tune --graph "$g" --gpus 1 --backend cuda --math "$math" -o "$s" --timeout 280 $search \
            -q ${SEG_TUNE_ARGS:-} >"$d.tune.log" 2>&1 || { echo "$m $size $math: tune failed: $(grep -m1 error "$d.tune.log")" | tee -a "$t"; continue; }
        else
          "$B/cli/hios" schedule --graph "$g" --algo hios-lp --gpus 1 -o "$s" >/dev/null 2>&1
        fi
        # The wide search at 2048 times every configuration of some 60 convolutions first.
        local run_s=${SEG_RUN_S:-300} rc=0
        timeout "$run_s" "$B/cli/hios" run --graph "$g" --schedule "$s" --backend cuda --math "$math" $search --warmup 5 --number 10 \
          --repeat 7 -o "$d/run.json" >"$d.run.log" 2>&1 || rc=$?
        if [ "$rc" != 0 ]; then
          local why="exit $rc"
          [ "$rc" = 124 ] && why="timed out after $run_s s"
          echo "$m $size $math: run failed ($why): $(grep -m1 error "$d.run.log")" | tee -a "$t"
          continue
        fi
        if [ -n "${SEG_PROFILE:-}" ]; then  # the slowest node signatures, to see where the time goes
          timeout 200 "$B/cli/hios" profile --graph "$g" -o "$d/db-$math.json" --math "$math" $search --no-cupti --iters 10 \
            >"$d.profile.log" 2>&1 && python3 scripts/profile_summary.py "$d/db-$math.json" --iters 10 | tee -a "$t"
        fi
        echo "$m $size $math hios $how $(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('%.3f ms, peak %.0f MB' % (r['latency_ms']['median'], max(x['peak_memory_mb'] for x in r['ranks'])))" "$d/run.json")" | tee -a "$t"
      done
    done
  done
  # The profile databases and graphs (weights stay behind), for a closer look on another machine.
  (cd "$w" && ls -d */db-*.json */g.json 2>/dev/null | tar cJf "$OUT/seg-profiles.tar.xz" -T - 2>/dev/null)
  if [ -n "${SEG_TORCH:-}" ]; then
    python3 scripts/bench_pytorch.py --models "$(echo $models | tr ' ' ,)" --sizes "$(echo ${SEG_SIZES:-1024 2048} | tr ' ' ,)" \
      --variants "${SEG_TORCH_VARIANTS:-compile-ro-cl,compile-ro-cl-bf16}" --warmup 10 --iters 30 --json "$OUT/seg-torch.jsonl" 2>&1 | grep -v Warning | tee -a "$t"
  fi
}

# A suite of scripts/gpu/: the build folder and OUT travel in the environment, and it gets
# its own folder under OUT.
suite_script() {
  local name=$1 file=$2
  shift 2
  OUT=$OUT/$name BUILD_DIR=$B bash "scripts/gpu/$file.sh" "$@" 2>&1 | tee "$OUT/$name.log" | tail -n "${TAIL:-40}"
}

suite_ab() {
  [ -n "${REF_TARBALL:-}${REF:-}" ] || { echo "ab: set REF_TARBALL (a git archive of the reference commit) or REF"; return; }
  [ $# -gt 0 ] || set -- inception_v3:2048 inception_v3:2048:bf16 nasnet_large:331
  REPEATS=${REPEATS:-2} TAIL=5 suite_script ab timing-ab "$@"
}

declare -A SCRIPT_SUITES=([bench]=bench [table]=table [tune]=tune [onnx]=onnx [bert]=bert [torch-check]=torch-check
  [serve]=serve [serve-scaling]=serve-scaling [shapes]=shapes [sweep]=sweep [kernels]=kernels
  [launch-order]=launch-order [split-probe]=split-probe [profile]=profile [analytic]=analytic
  [preset-fit]=preset-fit [presets]=presets [readme]=readme)
is_suite() {
  case "$1" in build|test|cases|ab|trained|seg|all) return 0 ;; esac
  [ -n "${SCRIPT_SUITES[$1]:-}" ]
}

run_suite() {
  local suite=$1
  shift
  case "$suite" in
    build) need_build ;;
    test) suite_test ;;
    cases) suite_cases ;;
    ab) suite_ab "$@" ;;
    trained) suite_trained ;;
    seg) suite_seg ;;
    all) need_build; suite_test; suite_cases; suite_ab ;;
    bench) mkdir -p "$OUT/bench"; gpu_build hios hios-gpu-bench; bash scripts/gpu/bench.sh "$B" "$OUT/bench" "$@" 2>&1 | tee "$OUT/bench.log" | tail -n 40 ;;
    *) suite_script "$suite" "${SCRIPT_SUITES[$suite]}" "$@" ;;
  esac
  echo "$suite done at $(( $(date +%s) - start )) s"
}

[ $# -gt 0 ] || { sed -n '2,50p' "$0"; exit 2; }
is_suite "$1" || { echo "gpu.sh: unknown suite '$1' (build, test, cases, ab, trained, seg, all, ${!SCRIPT_SUITES[*]})"; exit 2; }
# Split the words into suites and their arguments, then run them in order.
suite=$1
shift
args=()
while :; do
  if [ $# -eq 0 ] || is_suite "$1"; then
    run_suite "$suite" "${args[@]}"
    [ $# -eq 0 ] && break
    suite=$1
    args=()
  else
    args+=("$1")
  fi
  shift
done
