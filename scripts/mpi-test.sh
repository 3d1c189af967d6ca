#!/usr/bin/env bash
# mpi-test.sh — the MPI communicator's tests (engine/comm/mpi, build tag mpi)
# under mpirun, on one machine:
#   1. the conformance suite (commtest.RunRank) and the world checks, on NP
#      ranks (default 4);
#   2. the watchdog, on 2 ranks: rank 1 stops itself (SIGSTOP) before an
#      all-gather on their Z group of two; its partner must print which
#      collective gave up and exit with status 3, and the job must end long
#      before 60 s;
#   3. the CLI on MPI ranks: `memtrain finetune` (built with -tags mpi) of a
#      small model on one process, then under mpirun -np 4 with --parallel
#      dp=2,x=2 and y=2,z=2 (one rank a process); each step's loss must agree
#      within 1e-5 relative and the final checkpoints' weights within
#      ‖ΔW‖/‖W‖ ≤ 1e-5 (scripts/comparerun), and rank 0 alone must report.
# Exits 0 when all pass, non-zero otherwise, and 0 with a SKIP line when Open
# MPI is missing (mpirun, or pkg-config's ompi; Debian: libopenmpi-dev
# openmpi-bin).
#
# Usage: bash scripts/mpi-test.sh        NP=2 bash scripts/mpi-test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

NP=${NP:-4}
if ! command -v mpirun >/dev/null 2>&1 || ! command -v pkg-config >/dev/null 2>&1 ||
  ! pkg-config --exists ompi 2>/dev/null; then
  echo "mpi-test: SKIP: Open MPI not found (need mpirun and pkg-config ompi; Debian: apt-get install libopenmpi-dev openmpi-bin)"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "== build (go test -c -tags mpi ./engine/comm/mpi)"
go test -c -tags mpi -o "$tmp/mpi.test" ./engine/comm/mpi

# Open MPI's temporary buffers are malloc'd; glibc would mmap (and fault in)
# every large one afresh. 32 MiB is the highest threshold glibc accepts.
export MALLOC_MMAP_THRESHOLD_=${MALLOC_MMAP_THRESHOLD_:-33554432}
mpirun_base=(mpirun --allow-run-as-root --oversubscribe)
mpirun=("${mpirun_base[@]}" -np "$NP")

echo "== conformance on $NP ranks"
# A hung collective ends the job through the watchdog long before timeout(1).
if ! MEMTRAIN_COMM_TIMEOUT=${MEMTRAIN_COMM_TIMEOUT:-60s} timeout -k 10 600 \
  "${mpirun[@]}" "$tmp/mpi.test" -test.count=1; then
  echo "mpi-test: FAIL: conformance"
  exit 1
fi

echo "== watchdog: a stopped rank"
# Two ranks, one pair: with more, the other pairs wait for rank 0 at a
# barrier under the same timeout, and on a busy machine one of their
# watchdogs can fire first and end the job before rank 0 names its
# all-gather.
want='comm: group "z" (rank 0 of 2): all-gather at step 7: no answer from the group within 5s'
start=$SECONDS
set +e
MEMTRAIN_MPI_SIGSTOP_TEST=1 MEMTRAIN_COMM_TIMEOUT=5s timeout -k 10 60 \
  "${mpirun_base[@]}" -np 2 "$tmp/mpi.test" -test.count=1 -test.run '^TestWatchdogSIGSTOP$' >"$tmp/watchdog.log" 2>&1
rc=$?
set -e
took=$((SECONDS - start))
sed 's/^/    /' "$tmp/watchdog.log"
fail=
if [ "$rc" -eq 0 ]; then
  fail="the job exited 0"
elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  fail="the job was still running after 60 s (timeout(1) ended it, status $rc)"
elif ! grep -qF "$want" "$tmp/watchdog.log"; then
  fail="no line saying: $want"
elif [ "$rc" -ne 3 ] && ! grep -qE 'Exit code: +3' "$tmp/watchdog.log"; then
  fail="mpirun does not report a rank ending with the watchdog's status 3"
fi
if [ -n "$fail" ]; then
  echo "mpi-test: FAIL: watchdog: $fail (mpirun status $rc after ${took}s)"
  exit 1
fi
echo "watchdog: job ended with status $rc after ${took}s, naming group, collective and step"

echo "== memtrain finetune: one process vs mpirun -np 4 (dp=2,x=2; y=2,z=2)"
go build -tags mpi -o "$tmp/memtrain" ./cmd/memtrain
go build -o "$tmp/comparerun" ./scripts/comparerun
mt=$tmp/memtrain
# Y=2 needs the key/value heads split in two; the vocabulary (32000) splits
# too. AdamW at 1e-4 for three steps keeps float32's reordered sums well
# inside the tolerance (its first steps move each weight by ±lr whatever the
# gradient's size, so a large rate turns rounding into visible differences).
"$mt" init --out "$tmp/base" --tokenizer builtin:llama2 --seed 1 \
  --hidden 64 --layers 2 --heads 4 --kv-heads 2 --intermediate 128 >/dev/null
{ zcat data/assets/austen.jsonl.gz || true; } | head -200 >"$tmp/austen.jsonl" # zcat dies of SIGPIPE
"$mt" data prepare --input "$tmp/austen.jsonl" --tokenizer "$tmp/base" --out "$tmp/ds" \
  --mode document --seq-len 32 --holdout 0.05 --bos --eos >/dev/null
train=(finetune --model "$tmp/base" --data "$tmp/ds" --max_steps 3 --batch_size 8 --micro_batch 4
  --schedule.lr 1e-4 --eval_every 3)
"$mt" "${train[@]}" --out "$tmp/run-1" | sed "s#$tmp/##g; s/^/    1 rank: /"
for grid in dp=2,x=2 y=2,z=2; do
  if ! MEMTRAIN_COMM_TIMEOUT=${MEMTRAIN_COMM_TIMEOUT:-60s} timeout -k 10 300 \
    "${mpirun[@]}" "$mt" "${train[@]}" --out "$tmp/run-$grid" --parallel "$grid" >"$tmp/$grid.log" 2>&1; then
    sed 's/^/    /' "$tmp/$grid.log"
    echo "mpi-test: FAIL: finetune --parallel $grid under mpirun"
    exit 1
  fi
  sed "s#$tmp/##g; s/^/    $grid: /" "$tmp/$grid.log"
  if [ "$(grep -c '^trained ' "$tmp/$grid.log")" != 1 ]; then
    echo "mpi-test: FAIL: finetune --parallel $grid: want one report (rank 0's), got the above"
    exit 1
  fi
done
if ! "$tmp/comparerun" -loss-tol 1e-5 -weight-tol 1e-5 "$tmp/run-1" "$tmp/run-dp=2,x=2" "$tmp/run-y=2,z=2" | sed 's#'"$tmp"'/##g'; then
  echo "mpi-test: FAIL: MPI ranks differ from one rank"
  exit 1
fi
# Stop on one grid, resume on another: three steps on dp=2,x=2 stopped after
# the second (its sharded checkpoint written by the four processes), then
# resumed as y=2,z=2 — each rank reads only the pieces that overlap its
# blocks — equals the one-rank run within the same tolerance.
for leg in "dp=2,x=2 --stop-after 2" "y=2,z=2 --resume $tmp/run-moved"; do
  read -r grid extra <<<"$leg"
  # shellcheck disable=SC2086 # extra is two words on purpose
  if ! MEMTRAIN_COMM_TIMEOUT=${MEMTRAIN_COMM_TIMEOUT:-60s} timeout -k 10 300 \
    "${mpirun[@]}" "$mt" "${train[@]}" --out "$tmp/run-moved" --parallel "$grid" $extra >"$tmp/moved.log" 2>&1; then
    sed 's/^/    /' "$tmp/moved.log"
    echo "mpi-test: FAIL: finetune --parallel $grid $extra under mpirun"
    exit 1
  fi
  sed "s#$tmp/##g; s/^/    moved $grid: /" "$tmp/moved.log"
done
if ! "$tmp/comparerun" -loss-tol 1e-5 -weight-tol 1e-5 "$tmp/run-1" "$tmp/run-moved" | sed 's#'"$tmp"'/##g'; then
  echo "mpi-test: FAIL: a run stopped on dp=2,x=2 and resumed on y=2,z=2 differs from one rank"
  exit 1
fi
echo "mpi-test: PASS"
