package main

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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
			`eval memorization: --prefix 8,,16: list "8,,16": item 2 of 3 is empty`},
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
		{[]string{"bench", "comm", "--iters", "-1"}, "bench comm: --iters -1: want 1 to 1000000 (0: automatic)"},
		{[]string{"bench", "comm", "--world", "-2"}, "bench comm: --world -2: want 1 to 4096 (0: the largest of --ranks)"},
		{[]string{"bench", "comm", "--device", "d.json", "--peak", "NaN", "--efficiency", "0.5"}, "bench comm: --device needs --peak, a node's compute peak in GFLOP/s (got --peak NaN)"},
		{[]string{"bench", "comm", "--device", "d.json", "--peak", "+Inf", "--efficiency", "0.5"}, "(got --peak +Inf)"},
		{[]string{"bench", "comm", "--device", "d.json", "--peak", "100", "--efficiency", "NaN"}, "bench comm: --device needs --efficiency in (0, 1], the fraction of --peak a step reaches (got --efficiency NaN)"},
		{[]string{"bench", "comm", "--device", "d.json", "--peak", "100", "--efficiency", "1.5"}, "(got --efficiency 1.5)"},
		{[]string{"bench", "comm", "--peak", "-5"}, "bench comm: --peak and --efficiency go with --device"},
		// bench decode
		{[]string{"bench", "decode", "--batch", "0"}, "bench decode: --batch"},
		{[]string{"bench", "decode", "--prompt-len", "-1"}, "bench decode: --prompt-len -1: want 1 to 16777216"},
		{[]string{"bench", "decode", "--new-tokens", "0"}, "bench decode: --new-tokens 0: want 1 to 16777216"},
		{[]string{"bench", "decode", "--repeat", "-1"}, "bench decode: --repeat -1: want 1 to 1000000"},
		{[]string{"bench", "decode", "--threads", "-1"}, "--threads -1: want 1 to 4096 (0: all cores)"},
		// bench gemm
		{[]string{"bench", "gemm", "--threads", "-1"}, "bench gemm: --threads -1: want 1 to 4096 (0: all cores)"},
		{[]string{"bench", "gemm", "--repeat", "0"}, "bench gemm: --repeat 0: want 1 to 1000000"},
		// bench step
		{[]string{"bench", "step", "--batch", "-1"}, "bench step: --batch -1: want 1 to 1000000000"},
		{[]string{"bench", "step", "--seq-len", "-1"}, "bench step: --seq-len -1: want 1 to 16777216 (0: the default)"},
		{[]string{"bench", "step", "--steps", "0"}, "bench step: --steps 0: want 1 to 1000000"},
		{[]string{"bench", "step", "--threads", "-3"}, "--threads -3: want 1 to 4096 (0: all cores)"},
		{[]string{"bench", "step", "--max-positions", "-1"}, "bench step: --max-positions -1: want 1 to 16777216 (0: the preset's)"},
		{[]string{"bench", "step", "--max-positions", "16777217"}, "bench step: --max-positions 16777217: want 1 to 16777216 (0: the preset's)"},
		{[]string{"bench", "step", "--seq-len", "4096"}, "bench step: small: --seq-len 4096 exceeds the model's max_position_embeddings 2048 (raise it with --max-positions)"},
		{[]string{"bench", "step", "--seq-len", "512", "--max-positions", "256"}, "bench step: small: --seq-len 512 exceeds the model's max_position_embeddings 256 (raise it with --max-positions)"},
		// data prepare and data inspect
		{prepare("--seq-len", "-1"), "data prepare: --seq-len -1: want 1 to 16777216 (0: the default)"},
		{prepare("--holdout", "NaN"), "holdout NaN out of range [0, 1]"},
		{prepare("--holdout", "1.5"), "holdout 1.5 out of range [0, 1]"},
		{prepare("--seed", "-1"), "data prepare: --seed -1: want an integer of 0 or more"},
		{prepare("--threads", "-1"), "data prepare: --threads -1: want 1 to 4096 (0: all cores)"},
		{[]string{"data", "inspect", "nowhere", "--samples", "-1"}, "data inspect: --samples -1: want 0 to 1000000000"},
		// eval loss
		{[]string{"eval", "loss", "--model", "m", "--data", "d", "--batch", "0"}, "eval loss: --batch 0: want 1 to 1000000000"},
		{[]string{"eval", "loss", "--model", "m", "--data", "d", "--seq-len", "-1"}, "eval loss: --seq-len -1: want 1 to 16777216 (0: the default)"},
		{[]string{"eval", "loss", "--model", "m", "--data", "d", "--threads", "-1"}, "eval loss: --threads -1: want 1 to 4096 (0: all cores)"},
		// eval memorization
		{evalMem("--min-k", "150"), "eval memorization: --min-k 150: want a percentage in (0, 100]"},
		{evalMem("--min-k", "NaN"), "eval memorization: --min-k NaN: want a percentage in (0, 100]"},
		{evalMem("--min-k", "-5"), "eval memorization: --min-k -5: want a percentage in (0, 100]"},
		{evalMem("--batch", "0"), "eval memorization: --batch 0: want 1 to 1000000000"},
		{evalMem("--limit", "-1"), "eval memorization: --limit -1: want 1 to 1000000000 (0: all)"},
		{evalMem("--resamples", "-1"), "eval memorization: --resamples -1: want 1 to 100000 (0: 1,000)"},
		{evalMem("--suffix", "-4"), "eval memorization: --suffix -4: want 1 to 16777216 (0: the protocol's)"},
		{evalMem("--protocol", "carlini", "--prefix", "8,-16"), "prefix length -16 (want > 0)"},
		{evalMem("--seed", "-1"), "eval memorization: --seed -1: want an integer of 0 or more"},
		{evalMem("--threads", "-1"), "eval memorization: --threads -1: want 1 to 4096 (0: all cores)"},
		// finetune (its configuration's keys follow, every one)
		{finetuneArgs("--stop-after", "-1"), "finetune: --stop-after -1: want 1 to 1000000000 (0: no stop)"},
		{finetuneArgs("--max-steps", "-3"), "finetune: max_steps: -3 (want 0 or more)"},
		{finetuneArgs("--clip", "NaN"), "finetune: clip: NaN (want a finite number)"},
		{finetuneArgs("--threads", "-1"), "finetune: --threads -1: want 1 to 4096 (0: all cores)"},
		// generate
		{[]string{"generate", "--model", "m", "--prompt-ids", "1", "--max-new-tokens", "-1"}, "generate: --max-new-tokens -1: want 0 to 16777216"},
		{[]string{"generate", "--model", "m", "--prompt-ids", "1", "--threads", "-1"}, "generate: --threads -1: want 1 to 4096 (0: all cores)"},
		// goldfish
		{[]string{"goldfish", "--k", "1"}, "goldfish: --k 1: want 2 to 1000000000"},
		{[]string{"goldfish", "--h", "0"}, "goldfish: --h 0: want 1 to 1000000000"},
		{[]string{"goldfish", "--strategy", "static", "--start", "-1"}, "goldfish: --start -1: want 0 to 1000000000"},
		// init
		{initArgs("--hidden", "-1"), "init: --hidden -1: want a positive size, or 0 to keep the model's (hidden_size)"},
		{initArgs("--layers", "-1"), "init: --layers -1: want a positive size, or 0 to keep the model's (num_hidden_layers)"},
		{initArgs("--heads", "-1"), "init: --heads -1: want a positive size, or 0 to keep the model's (num_attention_heads)"},
		{initArgs("--kv-heads", "-1"), "init: --kv-heads -1: want a positive size, or 0 to keep the model's (num_key_value_heads)"},
		{initArgs("--intermediate", "-1"), "init: --intermediate -1: want a positive size, or 0 to keep the model's (intermediate_size)"},
		{initArgs("--head-dim", "-1"), "init: --head-dim -1: want a positive size, or 0 to keep the model's (head_dim)"},
		{initArgs("--seed", "-1"), "init: --seed -1: want an integer of 0 or more"},
		// inspect
		{[]string{"inspect", "--preset", "tiny", "--batch", "0"}, "inspect: --batch 0: want 1 to 1048576"},
		{[]string{"inspect", "--preset", "tiny", "--seq-len", "-1"}, "inspect: --seq-len -1: want 1 to 16777216 (0: the default)"},
		// plan
		{[]string{"plan", "--model", "tiny", "--gpus", "-4"}, "plan: --gpus -4: want 1 to 1048576"},
		{plan("--global-batch-tokens", "-1"), "plan: --global-batch-tokens must be positive, got -1"},
		{plan("--seq-len", "-1"), "plan: --seq-len -1: want 1 to 16777216 (0: the default)"},
		{plan("--top", "-1"), "plan: --top -1: want 1 to 1000000000 (0: all)"},
		{plan("--efficiency", "NaN"), "plan: --efficiency must lie in (0, 1], got NaN"},
		{plan("--efficiency", "2"), "plan: --efficiency must lie in (0, 1], got 2"},
		{plan("--peak", "NaN"), "plan: --peak and --bandwidth must be positive numbers, got NaN"},
		{plan("--bandwidth", "+Inf"), "plan: --peak and --bandwidth must be positive numbers, got 0 and +Inf"},
		{plan("--latency", "-5"), "plan: --latency must be 0 or more µs, got -5"},
		{plan("--latency", "-1"), "plan: --latency must be 0 or more µs, got -1"},
		{plan("--latency", "NaN"), "plan: --latency must be 0 or more µs, got NaN"},
		{plan("--micro-batch", "-1"), "plan: --micro-batch -1: want 1 to 1000000000 (0: try every size)"},
		// tokenize
		{[]string{"tokenize", "--tokenizer", "builtin:llama2", "--threads", "-1"}, "tokenize: --threads -1: want 1 to 4096 (0: all cores)"},
		// Counts beyond what they can mean, the prober's cases (every
		// integer flag's overflow follows, in "overflow"): products that
		// wrapped, allocations that panicked or ran out of memory.
		{finetuneArgs("--epochs", "4611686018427387905"), "finetune: epochs: 4611686018427387905 (want 0 to 1000000000)"},
		{finetuneArgs("--schedule.warmup", "9223372036854775807"), "finetune: schedule.warmup: 9223372036854775807 (want 0 to 1000000000)"},
		{finetuneArgs("--eval-batch", "9223372036854775807"), "finetune: eval_batch: 9223372036854775807 (want 0 to 1000000000)"},
		{finetuneArgs("--samples.max-new-tokens", "16777217"), "finetune: samples.max_new_tokens: 16777217 (want 0 to 16777216"},
		{[]string{"generate", "--model", "m", "--prompt-ids", "1", "--max-new-tokens", "9223372036854775807"}, "generate: --max-new-tokens 9223372036854775807: want 0 to 16777216"},
		{[]string{"bench", "decode", "--new-tokens", "9223372036854775807"}, "bench decode: --new-tokens 9223372036854775807: want 1 to 16777216"},
		{[]string{"bench", "decode", "--prompt-len", "9223372036854775807"}, "bench decode: --prompt-len 9223372036854775807: want 1 to 16777216"},
		{[]string{"bench", "step", "--steps", "9223372036854775807"}, "bench step: --steps 9223372036854775807: want 1 to 1000000"},
		{[]string{"bench", "comm", "--ranks", "100000"}, `bench comm: --ranks: "100000": want an integer in [1, 4096]`},
		{evalMem("--resamples", "9223372036854775807"), "eval memorization: --resamples 9223372036854775807: want 1 to 100000 (0: 1,000)"},
		{evalMem("--resamples", "1000000000"), "eval memorization: --resamples 1000000000: want 1 to 100000 (0: 1,000)"},
		{evalMem("--samples", "9223372036854775807", "--limit", "2"), "eval memorization: --samples 9223372036854775807: want 1 to 100000 (0: greedy only)"},
		// experiment run and demo: the engine's flags
		{[]string{"demo", "--out", out(), "--threads", "-1"}, "--threads -1: want 1 to 4096 (0: all cores)"},
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
			cases = append(cases, tc{finetuneArgs("--"+f.Flag(), "-1"), "finetune: --" + f.Flag() + " -1: "})
		}
	}
	for _, c := range cases {
		t.Run(caseName(c.args), func(t *testing.T) {
			wantError(t, c.args, c.want)
		})
	}
	t.Run("overflow", countFlagsOverflow)
	t.Run("overflow in a config file", configKeysOverflow)
}

// configKeysOverflow: every integer key of finetune's configuration,
// given in a --config file beyond what it can mean, is refused naming
// the key (and, beyond the key's type, the file and line): 2⁶³−1 is more
// than any count, 2⁶³ (2⁶⁴ for a seed) no integer of its type, which
// YAML decoding used to wrap or saturate.
func configKeysOverflow(t *testing.T) {
	dir := t.TempDir()
	for _, f := range options.Fields(&finetune.Config{}) {
		if f.Type.PkgPath() != "" {
			continue
		}
		var values []string
		switch f.Type.Kind() {
		case reflect.Int:
			values = []string{"9223372036854775807", "9223372036854775808"}
		case reflect.Uint64:
			values = []string{"18446744073709551616"}
		default:
			continue
		}
		for _, v := range values {
			// The key nested as its path is: goldfish.k is k under goldfish.
			parts := strings.Split(f.Key, ".")
			var yaml strings.Builder
			for i, p := range parts {
				yaml.WriteString(strings.Repeat("  ", i) + p + ":")
				if i < len(parts)-1 {
					yaml.WriteString("\n")
				}
			}
			yaml.WriteString(" " + v + "\n")
			file := filepath.Join(dir, strings.ReplaceAll(f.Key, ".", "-")+"-"+v+".yaml")
			os.WriteFile(file, []byte(yaml.String()), 0o644)
			want := f.Key + ": " + v + " (want 0 to 1000000000)"
			if v != "9223372036854775807" {
				last := parts[len(parts)-1]
				want = fmt.Sprintf("%s:%d:%d: %s: %s is out of range", file, len(parts), len(last)+2*len(parts)+1, f.Key, v)
			}
			t.Run(f.Key+"="+v, func(t *testing.T) {
				wantError(t, []string{"finetune", "--config", file, "--model", "m", "--data", "d", "--out", filepath.Join(dir, "out")}, want)
			})
		}
	}
}

// countBaseArgs are, for every command with an integer flag, the
// arguments it needs to get as far as checking its flags (paths that need
// not exist: a count is checked before anything is read).
func countBaseArgs(t *testing.T) map[string][]string {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	os.WriteFile(in, []byte(`{"text": "It is a truth universally acknowledged."}`+"\n"), 0o644)
	spec := filepath.Join(dir, "spec.yaml")
	os.WriteFile(spec, []byte("arms: [{name: standard, loss: standard}]\n"), 0o644)
	out := filepath.Join(dir, "out")
	return map[string][]string{
		"memtrain bench comm":        nil,
		"memtrain bench decode":      nil,
		"memtrain bench gemm":        nil,
		"memtrain bench step":        nil,
		"memtrain data prepare":      {"--input", in, "--tokenizer", "builtin:llama2", "--out", out},
		"memtrain data inspect":      {filepath.Join(dir, "nowhere")},
		"memtrain eval loss":         {"--model", "m", "--data", "d"},
		"memtrain eval memorization": {"--model", "m", "--data", "d", "--out", out},
		"memtrain finetune":          {"--model", "m", "--data", "d", "--out", out},
		"memtrain generate":          {"--model", "m", "--prompt-ids", "1"},
		"memtrain goldfish":          {"--input", in},
		"memtrain init":              {"--tokenizer", "builtin:llama2", "--out", out},
		"memtrain inspect":           {"--preset", "tiny"},
		"memtrain plan":              {"--model", "tiny", "--gpus", "2"},
		"memtrain tokenize":          {"--tokenizer", "builtin:llama2"},
		"memtrain experiment run":    {spec, "--out", out},
		"memtrain demo":              {"--out", out},
	}
}

// countFlagsOverflow (TestNumericFlags' overflow cases): every integer
// flag of every command — found by walking the commands, so that a new
// one is covered — refuses a value beyond what it can mean,
// 9223372036854775807 (and, beyond an int, 9223372036854775808), with
// exit code 1 and one line naming the flag (or the configuration key it
// sets) and the value, before anything runs: no panic, no allocation
// sized from it, no overflow into a wrong number.
func countFlagsOverflow(t *testing.T) {
	base := countBaseArgs(t)
	var walk func(c *cobra.Command)
	seen := 0
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if !c.Runnable() {
			return
		}
		path := c.CommandPath()
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if typ := f.Value.Type(); typ != "int" && typ != "int64" {
				return // seeds (uint64) take any value; lists are checked by their own tests
			}
			args, ok := base[path]
			if !ok {
				t.Errorf("%s --%s: no base arguments for the command in countBaseArgs", path, f.Name)
				return
			}
			key := strings.ReplaceAll(f.Name, "-", "_")
			for _, v := range []string{"9223372036854775807", "9223372036854775808"} {
				cl := append(append(strings.Fields(path)[1:], args...), "--"+f.Name, v)
				seen++
				t.Run(caseName(cl), func(t *testing.T) {
					out, errs, code := safeMemtrain(t, cl...)
					if code != 1 || strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "memtrain: ") {
						t.Fatalf("exit code %d, stdout %q, stderr %q; want 1 and one line", code, out, errs)
					}
					if !strings.Contains(errs, v) || !strings.Contains(errs, "--"+f.Name) && !strings.Contains(errs, key) {
						t.Errorf("stderr %q names neither --%s (or %s) nor %s", errs, f.Name, key, v)
					}
				})
			}
		})
	}
	walk(newRootCmd())
	if seen < 100 {
		t.Errorf("only %d cases: the walk missed commands", seen)
	}
}

// safeMemtrain is memtrain that turns a panic of the command into a
// failure of the test (exit code 2, its message), so that one case does
// not end the others.
func safeMemtrain(t *testing.T, args ...string) (out, errs string, code int) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			out, errs, code = "", fmt.Sprintf("panic: %v", p), 2
		}
	}()
	return memtrain(t, "", args...)
}
