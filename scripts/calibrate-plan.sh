#!/usr/bin/env bash
# calibrate-plan.sh — does `memtrain plan` rank the 4D grids of this machine
# the way the machine does? For a fixed small model and batch, for every valid
# grid of 4 and of 8 MPI ranks, it measures training steps under mpirun and
# compares their order with the plan's, by Spearman's rank correlation.
#
#   1. builds memtrain with -tags mpi, and scripts/spearman;
#   2. makes the model (the tiny preset: hidden 128, 4 layers, 4 heads, 2
#      key/value heads, the Llama 2 vocabulary of 32000, tied) and a dataset
#      of Austen paragraphs in sequences of 128 tokens;
#   3. measures the node: `bench step` at one rank gives the peak (memtrain's
#      GEMM at 2048³ on every core) and the efficiency of a whole step; for
#      NP in 4 and 8, `mpirun -np NP memtrain bench comm --device` times the
#      collectives with NP ranks and writes the device (device-NP.json);
#   4. `memtrain plan --device-json device-NP.json --json` predicts every grid
#      of NP ranks (batch 16 × 128 tokens, one micro-batch, no recomputation);
#   5. runs STEPS optimizer steps of `memtrain finetune --parallel GRID` under
#      `mpirun -np NP` for each of those grids, PASSES times, the passes
#      interleaved so that a burst of other work on the machine hits one
#      repeat of a grid rather than all of them;
#   6. scripts/spearman: per grid, measured step time (global batch tokens ÷
#      the median tokens/s of the steps after the first; the fastest pass) vs
#      predicted, and Spearman's ρ.
#
# Everything stays in OUT (default $TMPDIR/memtrain-calibration) for
# inspection. Needs Open MPI (mpirun, pkg-config ompi). Takes about 15 minutes
# on two cores.
#
# Usage: bash scripts/calibrate-plan.sh
#        OUT=/tmp/cal STEPS=6 PASSES=3 NPS="4" bash scripts/calibrate-plan.sh
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-${TMPDIR:-/tmp}/memtrain-calibration}
STEPS=${STEPS:-8}
PASSES=${PASSES:-2}
NPS=${NPS:-4 8}
BATCH=16 # sequences a step, all in one micro-batch: divisible by data·Z ≤ 8
SEQ=128

if ! command -v mpirun >/dev/null 2>&1 || ! pkg-config --exists ompi 2>/dev/null; then
  echo "calibrate-plan: needs Open MPI (mpirun and pkg-config ompi; Debian: apt-get install libopenmpi-dev openmpi-bin)" >&2
  exit 2
fi
mkdir -p "$OUT/bin"
echo "== build"
go build -tags mpi -o "$OUT/bin/memtrain" ./cmd/memtrain
go build -o "$OUT/bin/spearman" ./scripts/spearman
mt=$OUT/bin/memtrain
mpirun=(mpirun --allow-run-as-root --oversubscribe)

echo "== model and data"
if [ ! -d "$OUT/base" ]; then
  "$mt" init --out "$OUT/base" --tokenizer builtin:llama2 --preset tiny --seed 1
fi
if [ ! -d "$OUT/ds" ]; then
  { zcat data/assets/austen.jsonl.gz || true; } | head -400 >"$OUT/austen.jsonl" # zcat dies of SIGPIPE
  "$mt" data prepare --input "$OUT/austen.jsonl" --tokenizer "$OUT/base" --out "$OUT/ds" \
    --mode document --seq-len "$SEQ" --holdout 0.05 --bos --eos
fi

echo "== node: bench step (one rank, every core), the fastest of three"
json() { sed -n "s/.*\"$1\":\([-0-9.e+]*\).*/\1/p" "$2" | head -1; }
best=
for i in 1 2 3; do
  "$mt" bench step --preset tiny --batch "$BATCH" --seq-len "$SEQ" --steps 3 | tee "$OUT/step-$i.json"
  ms=$(json step_ms_median "$OUT/step-$i.json")
  if [ -z "$best" ] || awk -v a="$ms" -v b="$best" 'BEGIN { exit !(a < b) }'; then
    best=$ms
    cp "$OUT/step-$i.json" "$OUT/step.json"
  fi
done
peak=$(json gemm_gflops "$OUT/step.json")
eff=$(json efficiency "$OUT/step.json")
echo "peak $peak GFLOP/s (memtrain's GEMM, 2048³), step efficiency $eff"

for np in $NPS; do
  ranks=2
  [ "$np" -ge 4 ] && ranks=2,4
  [ "$np" -ge 8 ] && ranks=2,4,8
  echo "== bench comm on $np MPI ranks"
  "${mpirun[@]}" -np "$np" "$mt" bench comm --ranks "$ranks" --sizes 16K,64K,256K,1M,4M,16M,64M \
    --device "$OUT/device-$np.json" --peak "$peak" --efficiency "$eff" >"$OUT/comm-$np.jsonl"
  plan=(plan --model "$OUT/base" --gpus "$np" --device-json "$OUT/device-$np.json" --seq-len "$SEQ"
    --global-batch-tokens $((BATCH * SEQ)) --micro-batch "$BATCH" --recompute off --top 0)
  "$mt" "${plan[@]}" | tee "$OUT/plan-$np.txt"
  "$mt" "${plan[@]}" --json >"$OUT/plan-$np.json"
  # The table's rows start with the rank of the grid: #, dp, x, y, z, …
  grids=$(awk '$1 ~ /^[0-9]+$/ && NF > 10 { printf "dp=%s,x=%s,y=%s,z=%s\n", $2, $3, $4, $5 }' "$OUT/plan-$np.txt")
  echo "== finetune on $(echo "$grids" | wc -l) grids of $np ranks, $PASSES passes of $STEPS steps"
  mkdir -p "$OUT/logs"
  for pass in $(seq "$PASSES"); do
    for grid in $grids; do
      run=$OUT/runs-$np/pass-$pass/$grid
      log=$OUT/logs/$np-$pass-$grid.log
      rm -rf "$run"
      if ! timeout -k 10 600 "${mpirun[@]}" -np "$np" "$mt" finetune --model "$OUT/base" --data "$OUT/ds" \
        --out "$run" --max_steps "$STEPS" --batch_size "$BATCH" --micro_batch "$BATCH" \
        --schedule.lr 1e-4 --save_every 100000 --parallel "$grid" >"$log" 2>&1; then
        cat "$log"
        echo "calibrate-plan: FAIL: finetune --parallel $grid on $np ranks"
        exit 1
      fi
      echo "  pass $pass $grid: $(tail -1 "$log")" | sed "s#$OUT/##"
    done
  done
  echo "== $np ranks: measured vs predicted"
  "$OUT/bin/spearman" -plan "$OUT/plan-$np.json" "$OUT"/runs-"$np"/pass-*/dp=* | tee "$OUT/spearman-$np.txt"
done
