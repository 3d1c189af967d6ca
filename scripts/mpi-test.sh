#!/usr/bin/env bash
# mpi-test.sh — the MPI communicator's tests (engine/comm/mpi, build tag mpi)
# under mpirun, on one machine:
#   1. the conformance suite (commtest.RunRank) and the world checks, on NP
#      ranks (default 4);
#   2. the watchdog: world rank 1 stops itself (SIGSTOP) before an all-gather
#      on its Z group of two; its partner must print which collective gave up
#      and exit with status 3, and the job must end long before 60 s.
# Exits 0 when both pass, non-zero otherwise, and 0 with a SKIP line when Open
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
mpirun=(mpirun --allow-run-as-root --oversubscribe -np "$NP")

echo "== conformance on $NP ranks"
# A hung collective ends the job through the watchdog long before timeout(1).
if ! MEMTRAIN_COMM_TIMEOUT=${MEMTRAIN_COMM_TIMEOUT:-60s} timeout -k 10 600 \
  "${mpirun[@]}" "$tmp/mpi.test" -test.count=1; then
  echo "mpi-test: FAIL: conformance"
  exit 1
fi

echo "== watchdog: a stopped rank"
want='comm: group "z" (rank 0 of 2): all-gather at step 7: no answer from the group within 5s'
start=$SECONDS
set +e
MEMTRAIN_MPI_SIGSTOP_TEST=1 MEMTRAIN_COMM_TIMEOUT=5s timeout -k 10 60 \
  "${mpirun[@]}" "$tmp/mpi.test" -test.count=1 -test.run '^TestWatchdogSIGSTOP$' >"$tmp/watchdog.log" 2>&1
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
echo "mpi-test: PASS"
