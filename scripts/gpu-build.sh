#!/usr/bin/env bash
# gpu-build.sh — build, here, what scripts/gpu-check.sh runs on a GPU machine
# that has no Go: the memtrain binary and the CUDA backend's test binary, with
# CGO_ENABLED=0 (they load the CUDA libraries at run time and link only
# glibc's libc, libdl and libpthread, unversioned), stripped to keep them small.
#
# Usage: bash scripts/gpu-build.sh [DIR]   (DIR defaults to gpu-bin, which git ignores)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu-bin}
mkdir -p "$out"
export CGO_ENABLED=0
go build -trimpath -ldflags='-s -w' -o "$out/memtrain" ./cmd/memtrain
go test -c -trimpath -ldflags='-s -w' -o "$out/cuda.test" ./engine/cuda
git rev-parse HEAD >"$out/COMMIT" 2>/dev/null || echo unknown >"$out/COMMIT"
ls -l "$out"
