#!/usr/bin/env bash
# Copies what `hios import` builds against (Debian's libonnx-dev and libprotobuf-dev: the ONNX
# headers, libonnx_proto and libprotobuf, with protobuf's headers) into .deps/onnx, so that a GPU
# machine without those packages builds the importer too: scripts/gpu/build.sh points CMake at
# .deps/onnx when it is there. Name .deps/onnx in the device call's carry (about 12 MiB).
#
#   bash scripts/pack-importer-deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
lib=/usr/lib/x86_64-linux-gnu
for f in /usr/include/onnx/onnx-ml.pb.h /usr/include/google/protobuf/message.h "$lib/libonnx_proto.so" "$lib/libprotobuf.so"; do
  [ -e "$f" ] || { echo "pack-importer-deps: $f is missing (apt-get install libonnx-dev libprotobuf-dev)" >&2; exit 1; }
done
rm -rf .deps/onnx.new && mkdir -p .deps/onnx.new/include .deps/onnx.new/lib
cp -r /usr/include/onnx /usr/include/google .deps/onnx.new/include/
# The real files under their sonames, and the development names beside them.
for name in libonnx_proto libprotobuf; do
  real=$(readlink -f "$lib/$name.so")
  soname=$(objdump -p "$real" | awk '/SONAME/ {print $2}')
  cp "$real" ".deps/onnx.new/lib/$soname"
  ln -s "$soname" ".deps/onnx.new/lib/$name.so"
done
rm -rf .deps/onnx && mv .deps/onnx.new .deps/onnx
echo "pack-importer-deps: .deps/onnx, $(du -sh .deps/onnx | cut -f1)"
