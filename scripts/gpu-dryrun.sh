#!/usr/bin/env bash
# gpu-dryrun.sh — scripts/gpu-check.sh run here, on the fake CUDA libraries
# of engine/cuda/testdata (QUICK=1: every size shrunk; it measures
# nothing), to prove the script itself before it meets a GPU machine: it
# must end within its budget, pack its results into at most 8 files, and
# every stage that needs no torch and no transformers must pass (torch's
# peers and the transformers check have nothing to run on here).
#
# Usage: bash scripts/gpu-dryrun.sh   (needs Go and g++; CI runs it)
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bash scripts/gpu-build.sh "$work/bin" >/dev/null
fake=$(go test ./engine/cuda -run '^TestFakeCUDADir$' -v -count=1 | sed -n 's/.*MEMTRAIN_CUDA_LIB_DIR=//p' | head -1)
if [ -z "$fake" ]; then
  echo "gpu-dryrun: the fake CUDA libraries did not build" >&2
  exit 1
fi
budget=${BUDGET:-440}
start=$(date +%s)
rc=0
QUICK=1 BUDGET=$budget MEMTRAIN_CUDA_LIB_DIR=$fake OUT="$work/out" bash scripts/gpu-check.sh "$work/bin" >"$work/stdout" 2>&1 || rc=$?
took=$(($(date +%s) - start))
files=$(find "$work/out" -type f | wc -l)
# The stages' verdicts, less those whose other side is torch or
# transformers, which this machine does not run on a GPU.
fails=$(grep -- '- \*\*FAIL\*\*' "$work/out/gpu-check.md" | grep -v -e "torch" -e "transformers" -e "ratio" || true)
cat "$work/out/gpu-check.md"
echo
echo "gpu-dryrun: exit $rc in ${took} s (budget ${budget} s, the runner's limit 480 s), $files files in OUT"
ok=1
if [ "$took" -gt 480 ]; then
  echo "gpu-dryrun: FAIL: took ${took} s, beyond 480" >&2
  ok=0
fi
if [ "$files" -gt 8 ] || [ "$files" -lt 2 ]; then
  echo "gpu-dryrun: FAIL: $files files in OUT, want 2 to 8" >&2
  ok=0
fi
if [ -n "$fails" ]; then
  echo "gpu-dryrun: FAIL: stages that need no torch failed:" >&2
  echo "$fails" >&2
  ok=0
fi
[ $ok = 1 ] && echo "gpu-dryrun: ok"
[ $ok = 1 ]
