package main

import (
	"strings"
	"testing"
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
