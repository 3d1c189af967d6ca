#!/usr/bin/env bash
# mutation-check.sh proves that the numeric comparisons of the tests that
# carry memtrain's claims can fail. For each family of tests below and each
# mutation internal/numtest knows (MEMTRAIN_NUMTEST_MUTATE: element moves one
# value far outside any tolerance, nan makes it NaN, drop shortens the
# values or drops one named tensor), every listed test must fail; with no
# mutation, every one must pass. A test that passes under a mutation does
# not look at the values it claims to check, or swallows the comparison's
# error: the script names it and exits 1.
#
# Usage: scripts/mutation-check.sh [family...]   (default: all families)
# Prints one line a family and mutation, e.g.
#   golden    element  fail 5/5  (ok)
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=${CGO_ENABLED:-0}

# family  package  tests (a regular expression of whole test names, |-separated)
families=(
  "golden   ./engine/llama  TestGoldenAgainstPyTorch|TestLoRAGoldenAgainstPyTorch|TestLoRAMergeGolden|TestFamiliesAgainstPyTorch"
  "golden   ./engine/cpu    TestAdamWTorchFloat32"
  "golden   ./finetune      TestTrainStepsMatchPyTorch"
  "grid     ./engine/llama  TestGridGradients|TestGridInference|TestHeadChunks|TestVocabParallelChunks|TestStepSums|TestScore|TestFamiliesOnGrids"
  "bf16     ./engine/llama  TestBF16StepMatchesF32|TestBF16DataParallel|TestBF16CopiesFollowTheMasters|TestFamiliesBF16"
  "lora     ./engine/llama  TestLoRAOnGrids|TestLoRAEqualsMergedModel|TestBF16LoRAStepMatchesF32|TestLoRAFiniteDifferences|TestLoRARecomputeAndDropout"
  "stand-in ./engine/cuda   TestConformanceEmulated|TestModelEmulated|TestModelBF16Emulated|TestModelBF16LoRAEmulated|TestBF16Emulated|TestGridEmulated|TestFlashAttentionEmulated|TestFlashAttentionDeterministicEmulated|TestFlashAttentionLayoutEmulated|TestModelBF16FlashEmulated|TestMMAEmulated|TestFamiliesEmulated"
)
mutations=(element nan drop)

want=("$@")
selected() { # family
  [ ${#want[@]} -eq 0 ] && return 0
  local f
  for f in "${want[@]}"; do [ "$f" = "$1" ] && return 0; done
  return 1
}

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
failed=0
declare -A built

# run binary test mutation: the test's exit status, its output in $bin/out
run() {
  local status=0
  if [ -n "$3" ]; then
    MEMTRAIN_NUMTEST_MUTATE=$3 "$1" -test.run "^$2\$" -test.count 1 >"$bin/out" 2>&1 || status=$?
  else
    env -u MEMTRAIN_NUMTEST_MUTATE "$1" -test.run "^$2\$" -test.count 1 >"$bin/out" 2>&1 || status=$?
  fi
  return $status
}

declare -A total fails printed
for line in "${families[@]}"; do
  read -r family pkg tests <<<"$line"
  selected "$family" || continue
  name=$(echo "$pkg" | tr -c 'a-zA-Z0-9\n' '_')
  test_bin="$bin/$name.test"
  if [ -z "${built[$pkg]:-}" ]; then
    go test -c -o "$test_bin" "$pkg"
    built[$pkg]=1
  fi
  # Each test is run from its package's folder, where its testdata is.
  dir=$(go list -f '{{.Dir}}' "$pkg")
  IFS='|' read -ra names <<<"$tests"
  for test in "${names[@]}"; do
    if ! (cd "$dir" && run "$test_bin" "$test" ""); then
      echo "$family: $test fails with no mutation:"; tail -20 "$bin/out"; failed=1
      continue
    fi
    if grep -q '^testing: warning: no tests to run' "$bin/out"; then
      echo "$family: $pkg has no test $test"; failed=1
      continue
    fi
    for m in "${mutations[@]}"; do
      key="$family $m"
      total[$key]=$(( ${total[$key]:-0} + 1 ))
      if (cd "$dir" && run "$test_bin" "$test" "$m"); then
        echo "$family: $test passes under mutation $m: its comparisons do not bite"; failed=1
      elif ! grep -q -e "--- FAIL: $test" -e "^panic: " "$bin/out"; then
        echo "$family: $test under mutation $m failed without a test failure:"; tail -5 "$bin/out"; failed=1
      else
        fails[$key]=$(( ${fails[$key]:-0} + 1 ))
      fi
    done
  done
done

echo "family    mutation  failing tests"
for line in "${families[@]}"; do
  read -r family _ <<<"$line"
  for m in "${mutations[@]}"; do
    key="$family $m"
    [ -n "${total[$key]:-}" ] || continue
    [ -n "${printed[$key]:-}" ] && continue
    printed[$key]=1
    status=ok
    [ "${fails[$key]:-0}" -eq "${total[$key]}" ] || status=MISSED
    printf '%-9s %-9s fail %d/%d  (%s)\n' "$family" "$m" "${fails[$key]:-0}" "${total[$key]}" "$status"
  done
done
if [ $failed -ne 0 ]; then
  echo "mutation check FAILED"
  exit 1
fi
echo "mutation check passed: every listed test fails under every mutation and passes without"
