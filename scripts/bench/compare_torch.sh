#!/usr/bin/env bash
# compare_torch.sh — memtrain's training step against PyTorch's on this CPU,
# same model, batch and threads, run side by side (alternating, so that both
# see the same machine state), and the ratio of the median tokens/s; then
# torch's GFLOP/s and the ratio a step at memtrain's kernel peak
# (kernel_peak_gflops) would reach: the ceiling of the first ratio here.
#
# Torch runs twice a round: as installed, and tuned. As installed, on a
# small VM, half its step can be the kernel's: glibc returns each freed
# activation to the system (and faults it back in on the next step), and
# GNU OpenMP's idle threads spin on sched_yield. Tuned, it runs with
# OMP_WAIT_POLICY=PASSIVE and glibc keeping freed memory (MALLOC_*_ below):
# the peer at its best, and the ratio that compares like with like. The mmap
# threshold must exceed the largest activation (the logits, 262 MB at
# 8×256×32000): measured on peer-tiny, 1787–1975 tokens/s with 4 GiB against
# 709–811 with 32 MiB and 1258–1419 with glibc's own.
#
#   scripts/bench/compare_torch.sh [preset] [batch] [seq_len] [threads] [rounds] [precision]
#
# precision: f32 (both in float32), bf16 (both in mixed precision: memtrain's
# --precision bf16 against torch.autocast's bf16 on the CPU), or bf16-f32
# (memtrain in bf16 against torch in float32).
#
# Needs Debian's python3-torch (apt-get install python3-torch) and Go.
set -euo pipefail
cd "$(dirname "$0")/../.."
preset=${1:-small} batch=${2:-4} seq=${3:-256} threads=${4:-2} rounds=${5:-3} precision=${6:-f32}
case "$precision" in
  f32)     ours_p=f32  theirs_p=f32 ;;
  bf16)    ours_p=bf16 theirs_p=bf16 ;;
  bf16-f32) ours_p=bf16 theirs_p=f32 ;;
  *) echo "compare_torch.sh: precision $precision: want f32, bf16 or bf16-f32" >&2; exit 2 ;;
esac
case "$preset" in
  small)     shape=(--hidden 384 --layers 6 --heads 6 --kv-heads 6 --intermediate 1024 --vocab 32000 --tie) ;;
  peer-tiny) shape=(--hidden 256 --layers 4 --heads 4 --kv-heads 4 --intermediate 688 --vocab 32000 --tie) ;;
  *) echo "compare_torch.sh: no torch shape for preset $preset" >&2; exit 2 ;;
esac
bin=$(mktemp -d)/memtrain
go build -o "$bin" ./cmd/memtrain
tuned=(env OMP_WAIT_POLICY=PASSIVE MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=68719476736 MALLOC_TOP_PAD_=1073741824)
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get(sys.argv[2], 0))' "$1" "$2"; }
ours=() theirs=() best=() peaks=() fpt=0
for r in $(seq "$rounds"); do
  o=$("$bin" bench step --preset "$preset" --batch "$batch" --seq-len "$seq" --threads "$threads" --steps 5 --precision "$ours_p")
  torch=(/usr/bin/python3 scripts/bench/torch_train_step.py "${shape[@]}" --batch "$batch" --seq-len "$seq" --threads "$threads" --steps 5 --warmup 2 --precision "$theirs_p")
  t=$("${torch[@]}")
  tt=$("${tuned[@]}" "${torch[@]}")
  echo "memtrain:      $o"
  echo "torch:         $t"
  echo "torch (tuned): $tt"
  ours+=("$(field "$o" tokens_per_s)")
  peaks+=("$(field "$o" kernel_peak_gflops)")
  fpt=$(field "$o" model_flops_per_token)
  theirs+=("$(field "$t" tokens_per_s)")
  best+=("$(field "$tt" tokens_per_s)")
done
python3 - "${ours[*]}" "${theirs[*]}" "${best[*]}" "${peaks[*]}" "$fpt" <<'PY'
import statistics, sys
o, t, b, peaks = ([float(x) for x in a.split()] for a in sys.argv[1:5])
fpt = float(sys.argv[5])
mo = statistics.median(o)
# The ceiling: a step at the micro-kernel's peak on every FLOP.
peak = statistics.median(peaks)
for name, runs in (("torch as installed", t), ("torch tuned", b)):
    mt = statistics.median(runs)
    print(f"median tokens/s: memtrain {mo:.1f}, {name} {mt:.1f}, ratio memtrain/torch {mo/mt:.2f}")
    if peak > 0:
        tg = mt * fpt / 1e9
        print(f"  {name}'s step runs at {tg:.1f} GFLOP/s; memtrain's kernel peak {peak:.1f} GFLOP/s would be {peak/tg:.2f}x it")
PY
