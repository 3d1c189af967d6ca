#!/usr/bin/env bash
# compare_torch.sh — memtrain's training step against PyTorch's on this CPU,
# same model, batch and threads, run side by side (alternating, so that both
# see the same machine state), and the ratio of the median tokens/s; then
# torch's GFLOP/s and the ratio a step at memtrain's kernel peak
# (kernel_peak_gflops) would reach: the ceiling of the first ratio here.
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
ours=() theirs=() peaks=() fpt=0
for r in $(seq "$rounds"); do
  o=$("$bin" bench step --preset "$preset" --batch "$batch" --seq-len "$seq" --threads "$threads" --steps 5 --precision "$ours_p")
  t=$(/usr/bin/python3 scripts/bench/torch_train_step.py "${shape[@]}" --batch "$batch" --seq-len "$seq" --threads "$threads" --steps 5 --warmup 2 --precision "$theirs_p")
  echo "memtrain: $o"
  echo "torch:    $t"
  ours+=("$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["tokens_per_s"])' "$o")")
  peaks+=("$(python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get("kernel_peak_gflops", 0))' "$o")")
  fpt=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["model_flops_per_token"])' "$o")
  theirs+=("$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["tokens_per_s"])' "$t")")
done
python3 - "${ours[*]}" "${theirs[*]}" "${peaks[*]}" "$fpt" <<'PY'
import statistics, sys
o = [float(x) for x in sys.argv[1].split()]
t = [float(x) for x in sys.argv[2].split()]
mo, mt = statistics.median(o), statistics.median(t)
print(f"median tokens/s: memtrain {mo:.1f}, torch {mt:.1f}, ratio memtrain/torch {mo/mt:.2f}")
# The ceiling: a step at the micro-kernel's peak on every FLOP.
peak, fpt = statistics.median(float(x) for x in sys.argv[3].split()), float(sys.argv[4])
if peak > 0:
    tg = mt * fpt / 1e9
    print(f"torch's step runs at {tg:.1f} GFLOP/s; memtrain's kernel peak {peak:.1f} GFLOP/s would be {peak/tg:.2f}× it")
PY
