#!/usr/bin/env bash
# The README's commands on a GPU machine, as a new user types them ("every README
# command run as shown"): `make run` first (it installs, builds and runs the main job), then the
# command block of "A short tour" line by line with PATH set as the README says. Commands
# written for two GPUs run as written; on a one-GPU machine they must fail with one clear line
# ("too few GPUs"), and their one-GPU form runs next to them. Output: $OUT/readme.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/output/gpu-readme}
mkdir -p "$OUT"
exec > >(tee "$OUT/readme.log") 2>&1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
step() { echo; echo "\$ $*"; local s=$(date +%s); "$@"; local rc=$?; echo "[rc $rc, $(( $(date +%s) - s )) s]"; return 0; }
step make run JOBS=16
export PATH=$PWD/build/cli:$PATH
W=$(mktemp -d); cd "$W"
step hios models
step hios graph --model inception_v3 --height 1024 --width 1024 -o inception.json
step hios info inception.json
step hios schedule --graph inception.json --algo hios-lp --gpus 2 --cost analytic --device h200 -o s.json
step hios check --graph inception.json --schedule s.json
step hios profile --graph inception.json --gpus 2 -o prof.json
step hios profile --graph inception.json --gpus 1 -o prof1.json
step hios schedule --graph inception.json --algo hios-lp --gpus 1 --cost prof1.json -o s1.json
step hios lower --graph inception.json --schedule s1.json --rank 0
step mpirun -np 2 hios run --graph inception.json --schedule s.json --backend cuda --verify
step mpirun -np 1 hios run --graph inception.json --schedule s1.json --backend cuda --verify
step mpirun -np 1 hios run --graph inception.json --schedule s1.json --backend cuda --trace run.json
step mpirun -np 1 hios tune --graph inception.json --gpus 1 --backend cuda --profile-db inception.db.json -o tuned.json
step mpirun -np 1 hios tune --graph inception.json --gpus 1 --backend cuda --profile-db inception.db.json -o tuned2.json
step hios schedule --graph inception.json --gpus 2 --spatial auto -o split.json
step hios check --graph inception.json --schedule split.json
echo "total $(( $(date +%s) - t0 )) s"
