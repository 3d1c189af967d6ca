#!/usr/bin/env bash
# gpu-check.sh — the CUDA backend's checks on a GPU machine without Go, in one
# run of under eight minutes. Build the binaries first, where Go is:
#
#   bash scripts/gpu-build.sh            # → gpu-bin/memtrain, gpu-bin/cuda.test
#   OUT=/some/dir bash scripts/gpu-check.sh [BIN]   # on the GPU machine; BIN defaults to gpu-bin
#
# What must travel with it: the repository's tracked files (this script,
# scripts/gpu/*.py, data/assets/austen.jsonl.gz) and the built, git-ignored
# folder gpu-bin/ (memtrain, cuda.test, COMMIT) — with the device runner,
# `carry: ["gpu-bin"]`. The GPU machine needs no Go and no network: the
# CUDA libraries are found where a driver, a toolkit or a pip wheel put them
# (the CUDA 13 wheels' site-packages/nvidia/cu13/lib and nvidia/nccl/lib
# included; $PYTHON's site-packages are searched), torch from $PYTHON.
#
# Results: exactly two files in $OUT — gpu-check.md, the summary (also
# printed on stdout at the end), and gpu-check-logs.tar.gz, every stage's
# logs and measurements — so that they fit a device runner that returns at
# most 8 files. A run cut off midway still writes both (an EXIT trap).
#
# Stages, the most important numbers first:
#   0. nvidia-smi, the libraries memtrain finds (and torch's), versions;
#      the kernels compiled by the device's own NVRTC for sm_80 and sm_90
#      (the register, thread and stack-frame table of each kernel);
#   1. the conformance suite on the GPU against the float64 references, the
#      tensor-core attention on ragged lengths, head sizes and groups, a
#      small Llama's training step and generations against the CPU backend,
#      bf16 storage, the backend's contracts, a steady-state step with no
#      allocation (the counters), NCCL, a small Llama trained on a
#      grid of up to 4 GPUs against the CPU, AdamW on compact state (split
#      masters, bf16 and 8-bit moments) bit for bit the CPU's (cuda.test
#      -test.run TestGPU);
#   1b. bf16 causal attention, forward and backward, at the 8B head shape
#      (32 heads, 8 key/value heads, 128) and T = 4096, 8192: memtrain's
#      kernels against torch's flash scaled_dot_product_attention;
#   2. training-step tokens/s and MFU of Llama-3.1-8B cut to 4 layers at
#      sequence 2048: memtrain (the step that trains: sums on the device,
#      one fused AdamW; bf16 activations, then float32), plain torch
#      modules (flash and materialised attention) and, if installed,
#      transformers' LlamaForCausalLM;
#   3. a 20-step fine-tune of the tiny preset on the CPU and on the GPU
#      (float32 GEMMs, then bf16, then precision bf16 — bf16 activations —,
#      then float32 on a --parallel grid of one rank a GPU with NCCL: dp=1
#      on one GPU), losses compared step by step;
#   4. GEMM TFLOP/s at 8192³ (bf16, and float32 at each precision) against
#      torch.matmul in the same run;
#   5. a full fine-tuning step of the Llama-3.2-1B shape in bf16, memtrain
#      and torch;
#   6. the checkpoint memtrain saved on the GPU in stage 3, loaded by
#      transformers (if installed): per-document losses and greedy tokens.
# The whole run ends within $BUDGET seconds (default 440, under the device
# runner's eight minutes with the packing): each command's time limit is
# cut to the time left, and a stage with too little left is skipped.
# A stage that is skipped — out of time, a test that skips (a library not
# found), transformers missing — counts as a failure, not a pass.
# Exit status: 0 when every stage ran and passed, 1 otherwise.
#
# QUICK=1 shrinks every size (for a dry run of this script on the fake CUDA
# libraries of engine/cuda/testdata, with MEMTRAIN_CUDA_LIB_DIR pointing at
# them; it measures nothing).
set -u
cd "$(dirname "$0")/.."
BIN=${1:-gpu-bin}
OUT=${OUT:-./gpu-check-out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
MD="$OUT/gpu-check.md"
BIN=$(cd "$BIN" 2>/dev/null && pwd || echo "$BIN")
MT="$BIN/memtrain"
CT="$BIN/cuda.test"
WORK=$(mktemp -d)
LOGS="$WORK/logs" # every stage's logs, packed into $OUT at the end
mkdir -p "$LOGS"
# finish packs the logs, prints the summary and removes the work folder,
# however the run ends.
finish() {
  tar -czf "$OUT/gpu-check-logs.tar.gz" -C "$LOGS" . 2>/dev/null
  cat "$MD" 2>/dev/null
  rm -rf "$WORK"
}
trap finish EXIT
# One kernel cache for every stage: NVRTC compiles once, in stage 0.
export MEMTRAIN_CUDA_CACHE="$WORK/kernel-cache"
# NCCL on one machine: the loopback interface, whatever else the machine
# has (a container's interfaces may not route between its own ranks).
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
BUDGET=${BUDGET:-440}
W="$WORK/ft" # stage 3's runs, which stage 6 reads
failed=0
start=$(date +%s)
if [ -n "${QUICK:-}" ]; then
  GEMM=64 STEP_MODEL=tiny:2 ONE_B=tiny SEQ=32 FT_STEPS=2 FT_SEQ=16 FT_BATCH=2 ATTN_SEQ=40 ATTN_HEADS=2,1,64
else
  GEMM=8192 STEP_MODEL=llama3.1-8b:4 ONE_B=llama3.2-1b SEQ=2048 FT_STEPS=20 FT_SEQ=128 FT_BATCH=8 ATTN_SEQ=4096,8192 ATTN_HEADS=32,8,128
fi

note() { printf '%s\n' "$*" >>"$MD"; }
# left: the seconds of the budget still unused.
left() { echo $((BUDGET - ($(date +%s) - start))); }
# limit SECONDS: SECONDS, or the time left in the budget when that is less.
limit() {
  local rest=$(($(left) - 5))
  if [ "$rest" -lt "$1" ]; then echo $((rest < 1 ? 1 : rest)); else echo "$1"; fi
}
# stage TITLE: starts a stage, or returns 1 when the time budget has less
# than a stage's worth left: a skipped stage is a failure.
stage() {
  printf '\n## %s\n\n' "$1" >>"$MD"
  printf '== %s (%ss)\n' "$1" "$(($(date +%s) - start))"
  if [ "$(left)" -lt 25 ]; then
    note "- **FAIL** skipped: out of time ($(($(date +%s) - start)) s used of $BUDGET)"
    failed=1
    return 1
  fi
}
# run LOG LIMIT CMD...: runs CMD with a time limit — LIMIT, or the time
# left in the budget when that is less — appending to LOG. Out of time,
# it runs nothing and fails (124, as timeout would).
run() {
  local log=$1 limit
  limit=$(limit "$2")
  shift 2
  echo "\$ $*  (limit ${limit} s)" >>"$log"
  if [ "$(left)" -lt 6 ]; then
    echo "[not run: out of time]" >>"$log"
    return 124
  fi
  timeout -k 5 "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  echo "[exit $rc]" >>"$log"
  return $rc
}
# noskip LOG RC: RC, or 1 when a Go test in LOG skipped (a library not
# found, no GPU): a skipped check is not a pass.
noskip() {
  if grep -q -- '--- SKIP' "$1"; then
    note "- skipped tests (a failure): $(grep -- '--- SKIP' "$1" | sed 's/^ *--- SKIP: //; s/ (.*//' | head -5 | tr '\n' ' ')"
    return 1
  fi
  return "$2"
}
# peer LOG...: 0 when one of torch's logs has a measurement (a JSON line):
# without it there is no ratio to report, and the stage fails.
peer() {
  grep -qs '^{' "$@"
}
verdict() { # NAME RC: records a PASS/FAIL line
  if [ "$2" -eq 0 ]; then note "- **PASS** $1"; else
    note "- **FAIL** $1 (exit $2)"
    failed=1
  fi
}
# bench_table FILE...: the BENCH lines (and torch's JSON lines) as a table.
bench_table() {
  "$PY" - "$@" >>"$MD" 2>/dev/null <<'PY' || note "(no measurements)"
import json, sys
rows = []
for path in sys.argv[1:]:
    try:
        lines = open(path).read().splitlines()
    except OSError:
        continue
    for l in lines:
        l = l.strip()
        if l.startswith("BENCH "):
            l = l[6:]
        if not l.startswith("{"):
            continue
        try:
            rows.append(json.loads(l))
        except ValueError:
            pass
if not rows:
    raise SystemExit(1)
if rows[0].get("bench") == "attention" or "seq_len" in rows[0] and "tflops" in rows[0]:
    print("| impl | case | T | heads (kv) × dim | ms | TFLOP/s | memtrain ÷ torch |\n| --- | --- | ---: | --- | ---: | ---: | ---: |")
    torch = {(r["case"], r["seq_len"]): r["tflops"] for r in rows if r.get("impl", "").startswith("torch")}
    for r in rows:
        ratio = ""
        if "impl" not in r and (r["case"], r["seq_len"]) in torch:
            ratio = f"{r['tflops'] / torch[(r['case'], r['seq_len'])]:.2f}×"
        print(f"| {r.get('impl', 'memtrain')} | {r['case']} | {r['seq_len']} | {r['heads']} ({r['kv_heads']}) × {r['head_dim']} | "
              f"{r['ms']:.2f} | {r['tflops']:.1f} | {ratio} |")
elif "tflops" in rows[0]:
    print("| impl | case | size | ms | TFLOP/s |\n| --- | --- | --- | ---: | ---: |")
    for r in rows:
        print(f"| {r.get('impl', 'memtrain')} | {r['case']} | {r['m']}×{r['n']}×{r['k']} | {r['ms']:.2f} | {r['tflops']:.1f} |")
else:
    print("| impl | model | batch×seq | activations | gemm | step ms | tokens/s | TFLOP/s | MFU | peak GiB |\n| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        mfu = f"{100 * r['mfu']:.1f}%" if "mfu" in r else "–"
        print(f"| {r.get('impl', 'memtrain')} | {r['model']} | {r['batch']}×{r['seq_len']} | {r.get('precision', 'torch')} | {r.get('gemm', 'bf16 autocast')} | "
              f"{r['step_ms']:.1f} | {r['tokens_per_s']:.0f} | {r['achieved_tflops']:.1f} | {mfu} | {r.get('peak_bytes', 0) / 2**30:.1f} |")
PY
}

{
  echo "# memtrain GPU check"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $(cat "$BIN/COMMIT" 2>/dev/null || echo unknown), host $(hostname)"
} >"$MD"
if [ ! -x "$MT" ] || [ ! -x "$CT" ]; then
  note "**FAIL** binaries missing in $BIN: run scripts/gpu-build.sh where Go is, and carry $BIN here"
  echo "gpu-check: binaries missing in $BIN" >&2
  exit 1
fi

# ---------------------------------------------------------------------------
stage "0. Device and libraries"
L="$LOGS/stage0-device.log"
run "$L" 20 nvidia-smi
run "$L" 20 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader
note '```'
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader >>"$MD" 2>&1 || note "nvidia-smi failed"
note '```'
run "$L" 30 "$PY" -c 'import torch, os; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0)); print("torch lib", os.path.dirname(torch.__file__) + "/lib")'
run "$L" 30 "$PY" -c 'import transformers; print("transformers", transformers.__version__)'
# What memtrain finds: the libraries it loaded, their versions, the kernels'
# target (TestGPUConformance's first log line), without running the suite.
run "$L" 120 "$CT" -test.run '^TestGPUConformance$/^Memory$' -test.v -test.count=1
noskip "$L" $?
rc=$?
note '```'
grep -E "^(torch|transformers) |gpu_test.go:[0-9]+: cuda:|no GPU" "$L" | sed 's/^ *//' >>"$MD"
note '```'
verdict "memtrain loads CUDA and compiles its kernels" $rc
# The device's own NVRTC compiles every kernel for sm_80 and sm_90: the
# registers, threads and stack frames it gives (CI's NVRTC 11.8 checks the
# same rules).
L="$LOGS/stage0-nvrtc.log"
# (A dry run on the fake libraries compiles with the machine's real NVRTC.)
nvrtc_env=()
[ -n "${QUICK:-}" ] && nvrtc_env=(-u MEMTRAIN_CUDA_LIB_DIR)
MEMTRAIN_REQUIRE_NVRTC=1 MEMTRAIN_NVRTC_TEST=1 run "$L" 120 env "${nvrtc_env[@]}" "$CT" -test.run '^TestKernelsCompileWithNVRTC$' -test.v -test.count=1
rc=$?
note '```'
grep -E "nvrtc_compile_test.go:[0-9]+: NVRTC|^(--- |ok|FAIL)" "$L" | sed 's/^ *//' | head -8 >>"$MD"
note '```'
verdict "the device's NVRTC compiles every kernel (register and frame table in stage0-nvrtc.log)" $rc

# ---------------------------------------------------------------------------
if stage "1. Conformance on the GPU"; then
  L="$LOGS/stage1-conformance.log"
  run "$L" 180 "$CT" -test.run '^TestGPU(Conformance|Model|BF16|Backend|SteadyState|NCCL|Grid|GridBF16|FlashAttention|AdamWStepCompact|MasterSplitter)$' -test.v -test.count=1 -test.timeout 170s
  noskip "$L" $?
  rc=$?
  note '```'
  grep -E "^(--- |=== RUN|ok|FAIL|PASS)|^    --- FAIL|Error|panic" "$L" | grep -v "=== RUN" | head -60 >>"$MD"
  note '```'
  verdict "conformance suite, model against the CPU, bf16, contracts, NCCL, grid" $rc
fi

# ---------------------------------------------------------------------------
if stage "1b. Attention: memtrain against torch's flash SDPA (bf16, causal, heads $ATTN_HEADS, T = $ATTN_SEQ)"; then
  L="$LOGS/stage1b-attention.log"
  MEMTRAIN_GPU_BENCH=1 MEMTRAIN_GPU_BENCH_ATTN_SEQ=$ATTN_SEQ MEMTRAIN_GPU_BENCH_ATTN_HEADS=$ATTN_HEADS \
    run "$L" 120 "$CT" -test.run '^$' -test.bench '^BenchmarkGPUAttention$' -test.benchtime 1x -test.v -test.count=1
  noskip "$L" $?
  rc=$?
  run "$LOGS/stage1b-torch.log" 90 "$PY" scripts/gpu/torch_attention.py --seq-lens $ATTN_SEQ --heads $ATTN_HEADS
  bench_table "$L" "$LOGS/stage1b-torch.log"
  verdict "memtrain attention benchmark ran" $rc
  peer "$LOGS/stage1b-torch.log"
  verdict "torch's flash SDPA ran beside it" $?
fi

# ---------------------------------------------------------------------------
if stage "2. Training step: $STEP_MODEL (Llama-3.1-8B shape, 4 layers), sequence $SEQ"; then
  L="$LOGS/stage2-step.log"
  # Mixed precision first (the headline, as torch's bf16 autocast step),
  # then float32 activations.
  MEMTRAIN_GPU_BENCH=1 MEMTRAIN_GPU_BENCH_MODEL=$STEP_MODEL MEMTRAIN_GPU_BENCH_SEQ=$SEQ MEMTRAIN_GPU_BENCH_PRECISION=bf16 \
    run "$L" 120 "$CT" -test.run '^$' -test.bench '^BenchmarkGPUStep$' -test.benchtime 1x -test.v -test.count=1
  noskip "$L" $?
  rc=$?
  MEMTRAIN_GPU_BENCH=1 MEMTRAIN_GPU_BENCH_MODEL=$STEP_MODEL MEMTRAIN_GPU_BENCH_SEQ=$SEQ \
    run "$L" 90 "$CT" -test.run '^$' -test.bench '^BenchmarkGPUStep$' -test.benchtime 1x -test.v -test.count=1
  noskip "$L" $?
  rc=$((rc | $?))
  for attn in sdpa eager; do
    run "$LOGS/stage2-torch-$attn.log" 100 "$PY" scripts/gpu/torch_step.py --model $STEP_MODEL --seq-len $SEQ --attn $attn
  done
  run "$LOGS/stage2-hf.log" 100 "$PY" scripts/gpu/torch_step.py --impl hf --model $STEP_MODEL --seq-len $SEQ --attn sdpa
  bench_table "$L" "$LOGS"/stage2-torch-*.log "$LOGS/stage2-hf.log"
  verdict "memtrain training-step benchmark ran" $rc
  peer "$LOGS"/stage2-torch-*.log
  verdict "torch's step ran beside it (the ratio's other side)" $?
fi

# ---------------------------------------------------------------------------
if stage "3. Fine-tuning: CPU against GPU"; then
  L="$LOGS/stage3-finetune.log"
  mkdir -p "$W"
  ok=0
  run "$L" 60 "$MT" init --out "$W/base" --tokenizer builtin:llama2 --preset tiny --seed 1 || ok=1
  gzip -dc data/assets/austen.jsonl.gz | head -500 >"$W/austen.jsonl"
  run "$L" 60 "$MT" data prepare --input "$W/austen.jsonl" --tokenizer "$W/base" --out "$W/ds" \
    --mode document --seq-len $FT_SEQ --holdout 0.05 --bos --eos || ok=1
  common=(--model "$W/base" --data "$W/ds" --max_steps $FT_STEPS --batch_size $FT_BATCH --micro_batch $((FT_BATCH / 2))
    --schedule.lr 1e-3 --eval_every 0 --seed 1)
  run "$L" 90 "$MT" finetune "${common[@]}" --out "$W/cpu" --device cpu || ok=1
  MEMTRAIN_CUDA_GEMM=f32 run "$L" 60 "$MT" finetune "${common[@]}" --out "$W/gpu-f32" --device cuda || ok=1
  MEMTRAIN_CUDA_GEMM=bf16 run "$L" 60 "$MT" finetune "${common[@]}" --out "$W/gpu-bf16" --device cuda || ok=1
  run "$L" 60 "$MT" finetune "${common[@]}" --out "$W/gpu-mixed" --device cuda --precision bf16 || ok=1
  # The grid launcher on GPUs, one rank a GPU with NCCL communicators: with
  # one GPU a grid of one rank (NCCL's init and split, nothing to exchange).
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  case "${ngpu:-0}" in
  0 | 1) grid=dp=1 ;;
  2 | 3) grid=x=2 ;;
  *) grid=dp=2,x=2 ;;
  esac
  MEMTRAIN_CUDA_GEMM=f32 run "$L" 60 "$MT" finetune "${common[@]}" --out "$W/gpu-grid" --device cuda --parallel $grid || ok=1
  verdict "init, data prepare and five $FT_STEPS-step fine-tunes ran" $ok
  for mode in f32 bf16 mixed; do
    tol=1e-3
    [ $mode != f32 ] && tol=3e-2
    note ""
    what="$mode GEMMs"
    [ $mode = mixed ] && what="precision bf16 (bf16 activations and weight copies)"
    note "GPU with $what against the CPU:"
    note ""
    "$PY" scripts/gpu/compare_losses.py "$W/cpu/metrics.jsonl" "$W/gpu-$mode/metrics.jsonl" --rtol $tol >>"$MD" 2>&1
    verdict "losses of the $mode GPU run within $tol of the CPU's" $?
  done
  note ""
  note "GPU grid $grid (one rank a GPU, NCCL) with f32 GEMMs against the CPU:"
  note ""
  "$PY" scripts/gpu/compare_losses.py "$W/cpu/metrics.jsonl" "$W/gpu-grid/metrics.jsonl" --rtol 1e-3 >>"$MD" 2>&1
  verdict "losses of the GPU grid $grid within 1e-3 of the CPU's" $?
  for r in cpu gpu-f32 gpu-bf16 gpu-mixed gpu-grid; do
    [ -f "$W/$r/metrics.jsonl" ] && cp "$W/$r/metrics.jsonl" "$LOGS/stage3-$r-metrics.jsonl"
  done
fi

# ---------------------------------------------------------------------------
if stage "4. GEMM at ${GEMM}³"; then
  L="$LOGS/stage4-gemm.log"
  MEMTRAIN_GPU_BENCH=1 MEMTRAIN_GPU_BENCH_GEMM=$GEMM run "$L" 120 "$CT" -test.run '^$' -test.bench '^BenchmarkGPUGemm$' -test.benchtime 1x -test.v -test.count=1
  noskip "$L" $?
  rc=$?
  run "$LOGS/stage4-torch.log" 90 "$PY" scripts/gpu/torch_gemm.py --sizes $GEMM
  bench_table "$L" "$LOGS/stage4-torch.log"
  verdict "memtrain GEMM benchmark ran" $rc
  peer "$LOGS/stage4-torch.log"
  verdict "torch.matmul ran beside it" $?
fi

# ---------------------------------------------------------------------------
if stage "5. Full fine-tuning step: $ONE_B (Llama-3.2-1B shape), sequence $SEQ"; then
  L="$LOGS/stage5-1b.log"
  MEMTRAIN_GPU_BENCH=1 MEMTRAIN_GPU_BENCH_MODEL=$ONE_B MEMTRAIN_GPU_BENCH_SEQ=$SEQ MEMTRAIN_GPU_BENCH_PRECISION=bf16 \
    run "$L" 150 "$CT" -test.run '^$' -test.bench '^BenchmarkGPUStep$' -test.benchtime 1x -test.v -test.count=1
  noskip "$L" $?
  rc=$?
  run "$LOGS/stage5-torch.log" 100 "$PY" scripts/gpu/torch_step.py --model $ONE_B --seq-len $SEQ --attn sdpa
  bench_table "$L" "$LOGS/stage5-torch.log"
  verdict "memtrain 1B step ran" $rc
  peer "$LOGS/stage5-torch.log"
  verdict "torch's 1B step ran beside it" $?
fi

# ---------------------------------------------------------------------------
if stage "6. A GPU-saved checkpoint in transformers"; then
  L="$LOGS/stage6-hf.log"
  CK="$W/gpu-f32/checkpoints/$(cat "$W/gpu-f32/checkpoints/latest" 2>/dev/null)"
  if [ ! -f "$CK/config.json" ]; then
    note "no checkpoint from stage 3 ($CK)"
    verdict "checkpoint to load" 1
  else
    # Six Austen paragraphs as token ids (BOS first), at most 200 each.
    head -40 "$W/austen.jsonl" | tail -6 | "$MT" tokenize --tokenizer "$CK" --special 2>>"$L" |
      "$PY" -c 'import json, sys; [print(json.dumps({"input_ids": json.loads(l)["ids"][:200]})) for l in sys.stdin]' >"$W/docs.jsonl"
    prompt=$("$PY" -c 'import json, sys; print(",".join(map(str, json.loads(open(sys.argv[1]).readline())["input_ids"][:12])))' "$W/docs.jsonl")
    export MEMTRAIN_CUDA_GEMM=f32
    timeout -k 5 "$(limit 60)" "$MT" eval loss --model "$CK" --data "$W/docs.jsonl" --json --device cuda >"$W/eval.json" 2>>"$L"
    timeout -k 5 "$(limit 60)" "$MT" generate --model "$CK" --prompt-ids "$prompt" --max-new-tokens 16 \
      --stop-at-eos=false --json --device cuda >"$W/gen.jsonl" 2>>"$L"
    unset MEMTRAIN_CUDA_GEMM
    cp "$W/eval.json" "$W/gen.jsonl" "$LOGS/" 2>/dev/null
    timeout -k 5 "$(limit 90)" "$PY" scripts/gpu/hf_check.py --model "$CK" --docs "$W/docs.jsonl" \
      --memtrain-eval "$W/eval.json" --memtrain-generate "$W/gen.jsonl" >"$LOGS/stage6-compare.md" 2>>"$L"
    rc=$?
    cat "$LOGS/stage6-compare.md" >>"$MD"
    if [ $rc -eq 2 ]; then
      note "- **FAIL** skipped: transformers is not installed"
      failed=1
    else verdict "transformers reads the checkpoint; losses agree" $rc; fi
  fi
fi

note ""
if [ $failed -eq 0 ]; then note "**All stages ran and passed.**"; else note "**Some stage failed or was skipped.**"; fi
note "Total $(($(date +%s) - start)) s. Logs: gpu-check-logs.tar.gz."
echo "gpu-check: report in $MD, logs in $OUT/gpu-check-logs.tar.gz"
exit $failed
