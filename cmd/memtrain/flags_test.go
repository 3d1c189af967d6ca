package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/internal/options"
)

// TestListFlags: a comma-separated flag with an empty item ("1,,2", a
// trailing comma) is an error naming the flag and the item, before
// anything is loaded, not the list without it.
func TestListFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"generate --prompt-ids", []string{"generate", "--model", "nowhere", "--prompt-ids", "1,,2"},
			`generate: --prompt-ids: list "1,,2": item 2 of 3 is empty`},
		{"generate --prompt-ids, trailing comma", []string{"generate", "--model", "nowhere", "--prompt-ids", "1,2,"},
			`--prompt-ids: list "1,2,": item 3 of 3 is empty`},
		{"generate --prompt-ids, a second prompt", []string{"generate", "--model", "nowhere", "--prompt-ids", "1", "--prompt-ids", ",5"},
			`--prompt-ids: list ",5": item 1 of 2 is empty`},
		{"bench comm --ranks", []string{"bench", "comm", "--ranks", "2,,4"}, `bench comm: --ranks: list "2,,4": item 2 of 3 is empty`},
		{"bench comm --sizes", []string{"bench", "comm", "--sizes", "64K,,1M"}, `bench comm: --sizes: list "64K,,1M": item 2 of 3 is empty`},
		{"bench comm --ops", []string{"bench", "comm", "--ops", "all-reduce,"}, `bench comm: --ops: list "all-reduce,": item 2 of 2 is empty`},
		{"bench gemm --sizes", []string{"bench", "gemm", "--sizes", "8,,16"}, `bench gemm: --sizes: list "8,,16": item 2 of 3 is empty`},
		{"eval memorization --prefix", []string{"eval", "memorization", "--model", "m", "--data", "d", "--out", "o", "--protocol", "carlini", "--prefix", "8,,16"},
			`invalid argument "8,,16" for "--prefix" flag: list "8,,16": item 2 of 3 is empty`},
		{"eval memorization --data", []string{"eval", "memorization", "--model", "m", "--data", "a.jsonl,,b.jsonl", "--out", "o"},
			"eval memorization: --data: item 2 of 3 is empty"},
		{"eval memorization --non-members", []string{"eval", "memorization", "--model", "m", "--data", "a.jsonl", "--non-members", "b.jsonl,", "--out", "o"},
			"eval memorization: --non-members: item 2 of 2 is empty"},
		{"--parallel", []string{"generate", "--model", "nowhere", "--prompt-ids", "1", "--parallel", "dp=2,,x=2"},
			`--parallel: list "dp=2,,x=2": item 2 of 3 is empty`},
		{"--overlap", []string{"generate", "--model", "nowhere", "--prompt-ids", "1", "--parallel", "dp=2", "--overlap", "oar,,ors"},
			`--overlap: list "oar,,ors": item 2 of 3 is empty`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, tc.args, tc.want)
		})
	}
}

// caseName is a command line as a test's name, paths left out.
func caseName(args []string) string {
	var words []string
	for _, a := range args {
		if !strings.ContainsRune(a, filepath.Separator) {
			words = append(words, a)
		}
	}
	return strings.Join(words, " ")
}

// wantError runs the command line and checks that it fails with exit code
// 1 and one line on stderr holding want.
func wantError(t *testing.T, args []string, want string) {
	t.Helper()
	out, errs, code := memtrain(t, "", args...)
	if code != 1 {
		t.Errorf("%v: exit code %d, stdout %q, stderr %q; want 1", args, code, out, errs)
		return
	}
	if strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "memtrain: ") {
		t.Errorf("%v: stderr is not one line: %q", args, errs)
	}
	if !strings.Contains(errs, want) {
		t.Errorf("%v: stderr %q, want %q", args, errs, want)
	}
}

// TestNumericFlags: every numeric flag of every command refuses what it
// cannot mean — a negative count, zero where one is needed, a fraction
// outside its range, NaN and the infinities — in one line naming the flag
// (or the configuration key it sets) and the value, before anything runs.
func TestNumericFlags(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	os.WriteFile(in, []byte(`{"text": "It is a truth universally acknowledged."}`+"\n"), 0o644)
	out := func() string { return filepath.Join(t.TempDir(), "out") }
	prepare := func(flags ...string) []string {
		return append([]string{"data", "prepare", "--input", in, "--tokenizer", "builtin:llama2", "--out", out()}, flags...)
	}
	evalMem := func(flags ...string) []string {
		return append([]string{"eval", "memorization", "--model", "m", "--data", "d", "--out", out()}, flags...)
	}
	initArgs := func(flags ...string) []string {
		return append([]string{"init", "--tokenizer", "builtin:llama2", "--out", out()}, flags...)
	}
	finetuneArgs := func(flags ...string) []string {
		return append([]string{"finetune", "--model", "m", "--data", "d", "--out", out()}, flags...)
	}
	plan := func(flags ...string) []string {
		return append([]string{"plan", "--model", "tiny", "--gpus", "2"}, flags...)
	}
	type tc struct {
		args []string
		want string
	}
	cases := []tc{
		// bench comm
		{[]string{"bench", "comm", "--iters", "-1"}, "bench comm: --iters -1: want 0 (automatic) or more"},
		{[]string{"bench", "comm", "--world", "-2"}, "bench comm: --world -2: want 0"},
		{[]string{"bench", "comm", "--device", "d.json", "--peak", "NaN", "--efficiency", "0.5"}, "bench comm: --device needs --peak, a node's compute peak in GFLOP/s (got --peak NaN)"},
		{[]string{"bench", "comm", "--device", "d.json", "--peak", "+Inf", "--efficiency", "0.5"}, "(got --peak +Inf)"},
		{[]string{"bench", "comm", "--device", "d.json", "--peak", "100", "--efficiency", "NaN"}, "bench comm: --device needs --efficiency in (0, 1], the fraction of --peak a step reaches (got --efficiency NaN)"},
		{[]string{"bench", "comm", "--device", "d.json", "--peak", "100", "--efficiency", "1.5"}, "(got --efficiency 1.5)"},
		{[]string{"bench", "comm", "--peak", "-5"}, "bench comm: --peak and --efficiency go with --device"},
		// bench decode
		{[]string{"bench", "decode", "--batch", "0"}, "bench decode: --batch"},
		{[]string{"bench", "decode", "--prompt-len", "-1"}, "bench decode: --batch, --prompt-len"},
		{[]string{"bench", "decode", "--new-tokens", "0"}, "--new-tokens and --repeat must be positive"},
		{[]string{"bench", "decode", "--repeat", "-1"}, "--new-tokens and --repeat must be positive"},
		{[]string{"bench", "decode", "--threads", "-1"}, "--threads -1: want 0 (all cores) or more"},
		// bench gemm
		{[]string{"bench", "gemm", "--threads", "-1"}, "bench gemm: --threads -1: want 0 (all cores) or more"},
		{[]string{"bench", "gemm", "--repeat", "0"}, "bench gemm: --repeat 0: want at least 1"},
		// bench step
		{[]string{"bench", "step", "--batch", "-1"}, "bench step: --batch -1: want 1 or more"},
		{[]string{"bench", "step", "--seq-len", "-1"}, "bench step: --seq-len -1: want 1 or more (0: the default)"},
		{[]string{"bench", "step", "--steps", "0"}, "bench step: --steps 0: want 1 or more"},
		{[]string{"bench", "step", "--threads", "-3"}, "--threads -3: want 0 (all cores) or more"},
		{[]string{"bench", "step", "--max-positions", "-1"}, "bench step: --max-positions -1: want 1 to 16777216 (0: the preset's 2048)"},
		{[]string{"bench", "step", "--max-positions", "16777217"}, "bench step: --max-positions 16777217: want 1 to 16777216 (0: the preset's 2048)"},
		{[]string{"bench", "step", "--seq-len", "4096"}, "bench step: --seq-len 4096 exceeds small's max_position_embeddings 2048 (raise it with --max-positions)"},
		{[]string{"bench", "step", "--seq-len", "512", "--max-positions", "256"}, "bench step: --seq-len 512 exceeds small's max_position_embeddings 256 (raise it with --max-positions)"},
		// data prepare and data inspect
		{prepare("--seq-len", "-1"), "data prepare: --seq-len -1: want 1 or more (0: the default)"},
		{prepare("--holdout", "NaN"), "holdout NaN out of range [0, 1]"},
		{prepare("--holdout", "1.5"), "holdout 1.5 out of range [0, 1]"},
		{prepare("--seed", "-1"), `invalid argument "-1" for "--seed" flag`},
		{prepare("--threads", "-1"), "data prepare: --threads -1: want 0 (all cores) or more"},
		{[]string{"data", "inspect", "nowhere", "--samples", "-1"}, "data inspect: --samples -1: want 0 or more"},
		// eval loss
		{[]string{"eval", "loss", "--model", "m", "--data", "d", "--batch", "0"}, "eval loss: --batch 0: want 1 or more"},
		{[]string{"eval", "loss", "--model", "m", "--data", "d", "--seq-len", "-1"}, "eval loss: --seq-len -1: want 1 or more"},
		{[]string{"eval", "loss", "--model", "m", "--data", "d", "--threads", "-1"}, "eval loss: --threads -1: want 0 (all cores) or more"},
		// eval memorization
		{evalMem("--min-k", "150"), "eval memorization: --min-k 150: want a percentage in (0, 100]"},
		{evalMem("--min-k", "NaN"), "eval memorization: --min-k NaN: want a percentage in (0, 100]"},
		{evalMem("--min-k", "-5"), "eval memorization: --min-k -5: want a percentage in (0, 100]"},
		{evalMem("--batch", "0"), "eval memorization: --batch 0: want 1 or more"},
		{evalMem("--limit", "-1"), "eval memorization: --limit -1: want 0 (all) or more"},
		{evalMem("--resamples", "-1"), "eval memorization: --resamples -1: want 0 (1,000) or more"},
		{evalMem("--suffix", "-4"), "eval memorization: --suffix -4: want a length of 1 or more"},
		{evalMem("--protocol", "carlini", "--prefix", "8,-16"), "prefix length -16 (want > 0)"},
		{evalMem("--seed", "-1"), `invalid argument "-1" for "--seed" flag`},
		{evalMem("--threads", "-1"), "eval memorization: --threads -1: want 0 (all cores) or more"},
		// finetune (its configuration's keys follow, every one)
		{finetuneArgs("--stop-after", "-1"), "finetune: --stop-after -1: want a step of 1 or more"},
		{finetuneArgs("--max-steps", "-3"), "finetune: max_steps: -3 (want 0 or more)"},
		{finetuneArgs("--clip", "NaN"), "finetune: clip: NaN (want a finite number)"},
		{finetuneArgs("--threads", "-1"), "finetune: --threads -1: want 0 (all cores) or more"},
		// generate
		{[]string{"generate", "--model", "m", "--prompt-ids", "1", "--max-new-tokens", "-1"}, "generate: --max-new-tokens -1: want 0 or more"},
		{[]string{"generate", "--model", "m", "--prompt-ids", "1", "--threads", "-1"}, "generate: --threads -1: want 0 (all cores) or more"},
		// goldfish
		{[]string{"goldfish", "--k", "1"}, "goldfish: k must be ≥ 2, got 1"},
		{[]string{"goldfish", "--h", "0"}, "goldfish: h (the context width) must be ≥ 1"},
		{[]string{"goldfish", "--strategy", "static", "--start", "-1"}, "goldfish: start must be ≥ 0, got -1"},
		// init
		{initArgs("--hidden", "-1"), "init: --hidden -1: want a positive size, or 0 to keep the model's (hidden_size)"},
		{initArgs("--layers", "-1"), "init: --layers -1: want a positive size, or 0 to keep the model's (num_hidden_layers)"},
		{initArgs("--heads", "-1"), "init: --heads -1: want a positive size, or 0 to keep the model's (num_attention_heads)"},
		{initArgs("--kv-heads", "-1"), "init: --kv-heads -1: want a positive size, or 0 to keep the model's (num_key_value_heads)"},
		{initArgs("--intermediate", "-1"), "init: --intermediate -1: want a positive size, or 0 to keep the model's (intermediate_size)"},
		{initArgs("--head-dim", "-1"), "init: --head-dim -1: want a positive size, or 0 to keep the model's (head_dim)"},
		{initArgs("--seed", "-1"), `invalid argument "-1" for "--seed" flag`},
		// inspect
		{[]string{"inspect", "--preset", "tiny", "--batch", "0"}, "inspect: --batch 0: want 1 or more"},
		{[]string{"inspect", "--preset", "tiny", "--seq-len", "-1"}, "inspect: --seq-len -1: want 1 or more"},
		// plan
		{[]string{"plan", "--model", "tiny", "--gpus", "-4"}, "plan: --gpus must be positive, got -4"},
		{plan("--global-batch-tokens", "-1"), "plan: --global-batch-tokens must be positive, got -1"},
		{plan("--seq-len", "-1"), "plan: --seq-len must be positive, got -1"},
		{plan("--top", "-1"), "plan: --top must not be negative, got -1"},
		{plan("--efficiency", "NaN"), "plan: --efficiency must lie in (0, 1], got NaN"},
		{plan("--efficiency", "2"), "plan: --efficiency must lie in (0, 1], got 2"},
		{plan("--peak", "NaN"), "plan: --peak and --bandwidth must be positive numbers, got NaN"},
		{plan("--bandwidth", "+Inf"), "plan: --peak and --bandwidth must be positive numbers, got 0 and +Inf"},
		{plan("--latency", "-5"), "plan: --latency must be 0 or more µs, got -5"},
		{plan("--latency", "-1"), "plan: --latency must be 0 or more µs, got -1"},
		{plan("--latency", "NaN"), "plan: --latency must be 0 or more µs, got NaN"},
		{plan("--micro-batch", "-1"), "plan: --micro-batch must be positive, got -1"},
		// tokenize
		{[]string{"tokenize", "--tokenizer", "builtin:llama2", "--threads", "-1"}, "tokenize: --threads -1: want 0 (all cores) or more"},
		// experiment run and demo: the engine's flags
		{[]string{"demo", "--out", out(), "--threads", "-1"}, "--threads -1: want 0 (all cores) or more"},
	}
	// Every numeric key of finetune's configuration, as its flag.
	for _, f := range options.Fields(&finetune.Config{}) {
		if f.Type.PkgPath() != "" {
			continue // an enumeration, set by name
		}
		switch f.Type.Kind() {
		case reflect.Float64:
			for _, v := range []string{"NaN", "+Inf", "-Inf"} {
				cases = append(cases, tc{finetuneArgs("--"+f.Flag(), v), "finetune: " + f.Key + ": " + v + " (want a finite number)"})
			}
		case reflect.Int:
			cases = append(cases, tc{finetuneArgs("--"+f.Flag(), "-1"), "finetune: " + f.Key + ": -1"})
		case reflect.Uint64:
			cases = append(cases, tc{finetuneArgs("--"+f.Flag(), "-1"), `invalid argument "-1" for "--` + f.Flag() + `" flag`})
		}
	}
	for _, c := range cases {
		t.Run(caseName(c.args), func(t *testing.T) {
			wantError(t, c.args, c.want)
		})
	}
}
