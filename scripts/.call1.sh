#!/usr/bin/env bash
# one device call: groups of gpu-tune.sh runs, each skipped if the call's time left is too short
O=$OUT; export BUILD_DIR=/tmp/b PACK=0
LIMIT=${LIMIT:-585}
group() {  # NAME NEED_S TUNE_S CONFIG...
  local name=$1 need=$2 t=$3; shift 3
  if [ $((SECONDS + need)) -gt "$LIMIT" ]; then echo "skip $name ($*): ${SECONDS}s used"; return; fi
  echo "== $name $* at ${SECONDS}s"
  OUT=$O/$name TUNE_S=$t STALL_S=$((t-5)) timeout $((LIMIT - SECONDS)) bash scripts/gpu-tune.sh "$@" 2>&1 | tail -25
}
eval "$GROUPS_SPEC"
echo "done at ${SECONDS}s"
(cd "$O" && tar czf all.tgz --exclude=all.tgz -- * && find . -mindepth 1 -maxdepth 1 ! -name all.tgz -exec rm -rf {} +)
