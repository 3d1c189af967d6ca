package main

import (
	"path/filepath"
	"testing"

	"github.com/memtrain/memtrain/engine/launch"
)

// TestCountsAgainstTheRun: counts in range on their own that a run's
// model, data or machine cannot take are refused in one line naming the
// flag or key, before anything is allocated: epochs whose steps (epochs ×
// steps an epoch, multiplied without overflow; 4611686018427387905 epochs
// of 4 steps wrapped around to one epoch) are more than any run's; an
// eval_batch whose held-out passes alone do not fit (the message named
// the training batch); new tokens beyond the model's positions; bench
// comm's ranks and buffers beyond the host's memory (100,000 ranks ran
// out of memory in seconds); the filesystem root or the home folder as a
// run folder.
func TestCountsAgainstTheRun(t *testing.T) {
	base, ds := finetuneFixture(t, "builtin:llama2")
	home := t.TempDir()
	t.Setenv("HOME", home)
	run := func(flags ...string) []string {
		return append([]string{"finetune", "--model", base, "--data", ds, "--out", filepath.Join(t.TempDir(), "run")}, flags...)
	}
	for _, tc := range []struct {
		args  []string
		limit string // MEMTRAIN_MEMORY_LIMIT
		want  string
	}{
		{run("--epochs", "900000000"), "", "finetune: epochs 900000000 of "},
		{run("--epochs", "900000000"), "", " steps each is more than 1000000000 steps (want at most "},
		{run("--epochs", "4611686018427387905"), "", "finetune: epochs: 4611686018427387905 (want 0 to 1000000000)"},
		{run("--eval-every", "1", "--eval-batch", "1000000"), "1GiB",
			"finetune: eval_batch 1000000: the held-out evaluation's passes of 1000000 sequences need "},
		{[]string{"generate", "--model", base, "--prompt-ids", "1,2,3", "--max-new-tokens", "2046"}, "",
			"generate: --max-new-tokens 2046: want 0 to 2045 (the new tokens and the longest prompt's 3 within " + base + "'s max_position_embeddings 2048)"},
		{[]string{"bench", "comm", "--ranks", "2", "--sizes", "64K", "--ops", "all-reduce"}, "1MiB",
			"bench comm: 2 ranks in this process with buffers of up to 64.0 KiB need about 2.3 MiB of host memory, but 1.0 MiB is free"},
		{[]string{"finetune", "--model", base, "--data", ds, "--out", "/"}, "", "finetune: out: / is the filesystem root itself"},
		{[]string{"finetune", "--model", base, "--data", ds, "--out", home + "/."}, "", "finetune: out: " + home + "/. is your home folder itself"},
	} {
		t.Run(caseName(tc.args), func(t *testing.T) {
			t.Setenv(launch.MemoryLimitEnv, tc.limit)
			wantError(t, tc.args, tc.want)
		})
	}
}
