package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/data"
)

// dataCorpus writes a small JSONL corpus with two bad lines and returns
// its path.
func dataCorpus(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for i := range 40 {
		fmt.Fprintf(&b, "{\"text\": \"Paragraph %d: it is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.\"}\n", i)
		if i == 4 {
			b.WriteString("{oops\n")
		}
		if i == 9 {
			b.WriteString("{\"title\": \"no text\"}\n")
		}
	}
	p := filepath.Join(t.TempDir(), "corpus.jsonl")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDataPrepareInspect(t *testing.T) {
	in := dataCorpus(t)
	ds := filepath.Join(t.TempDir(), "ds")
	out, errs, code := memtrain(t, "", "data", "prepare", "--input", in, "--tokenizer", "builtin:llama2",
		"--out", ds, "--mode", "document", "--seq-len", "16", "--bos", "--eos", "--holdout", "0.25", "--seed", "3", "--threads", "2")
	if code != 0 {
		t.Fatalf("prepare failed: %s", errs)
	}
	for _, want := range []string{
		"read 1 file", "MB/s with 2 threads",
		"documents 40 (train ", "of 16, document mode", "truncated 40 documents",
		"bad records: 2 (invalid-json 1, missing-field 1)",
		in + ":6: invalid JSON", in + `:12: no field "text"`,
		"wrote " + ds,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("prepare output lacks %q:\n%s", want, out)
		}
	}

	out, errs, code = memtrain(t, "", "data", "inspect", ds, "--tokenizer", "builtin:llama2", "--samples", "2")
	if code != 0 {
		t.Fatalf("inspect failed: %s", errs)
	}
	for _, want := range []string{
		"memtrain-dataset v1", "vocab 32000, bos 1, eos 2", "document mode, seq_len 16, bos yes, eos yes, pad 2, holdout 0.25 (seed 3)",
		"total              40", "document lengths (tokens)", "targets per sequence", "16–31", "█",
		"train sequence 0: document ", `"<s> Paragraph `, "train sequence 1:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
	}

	out, _, code = memtrain(t, "", "data", "inspect", ds, "--json", "--samples", "1")
	if code != 0 {
		t.Fatal("inspect --json failed")
	}
	var rep data.Inspection
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, out)
	}
	m := rep.Manifest
	if m.Counts.Documents != 40 || m.Counts.Sequences != 40 || m.Splits.Train.Documents+m.Splits.Holdout.Documents != 40 || m.Problems.Total() != 2 {
		t.Errorf("manifest %+v", m.Counts)
	}
	// Without --tokenizer, decoded by the tokenizer the dataset carries.
	if len(rep.Samples) != 1 || rep.Samples[0].Text == nil || !strings.HasPrefix(*rep.Samples[0].Text, "<s> Paragraph ") ||
		len(rep.Samples[0].IDs) != 17 || rep.Samples[0].IDs[0] != 1 {
		t.Errorf("samples %+v", rep.Samples)
	}
	if len(rep.DocumentLengths) == 0 || rep.SequenceTargets[len(rep.SequenceTargets)-1].Count != 40 {
		t.Errorf("histograms %+v %+v", rep.DocumentLengths, rep.SequenceTargets)
	}
	// The dataset opens for training.
	s, err := data.OpenStore(ds)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.SeqLen() != 16 || s.NumSequences(data.Train)+s.NumSequences(data.Holdout) != 40 {
		t.Errorf("store: seq_len %d", s.SeqLen())
	}
}

func TestDataPrepareTextFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "books")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "b.txt"), []byte("Second book.\n\nIts second paragraph.\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "a.md"), []byte("First book.\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "skip.csv"), []byte("x,y\n"), 0o644)
	ds := filepath.Join(t.TempDir(), "ds")
	out, errs, code := memtrain(t, "", "data", "prepare", dir, "--tokenizer", "builtin:llama2", "--out", ds, "--paragraphs", "--seq-len", "8", "--eos")
	if code != 0 {
		t.Fatalf("prepare failed: %s", errs)
	}
	if !strings.Contains(out, "read 2 files") || !strings.Contains(out, "documents 3 ") || !strings.Contains(out, "skip.csv: skipped") {
		t.Errorf("output:\n%s", out)
	}
	out, _, _ = memtrain(t, "", "data", "inspect", ds, "--samples", "1")
	if !strings.Contains(out, "a.md:1), 8 targets") || !strings.Contains(out, `"<s> First book.`) {
		t.Errorf("inspect decoded by the dataset's tokenizer:\n%s", out)
	}
}

// TestDataErrors: each failure is one line naming what is wrong, exit 1.
func TestDataErrors(t *testing.T) {
	in := dataCorpus(t)
	good := filepath.Join(t.TempDir(), "ds")
	if _, errs, code := memtrain(t, "", "data", "prepare", "--input", in, "--tokenizer", "builtin:llama2", "--out", good, "--seq-len", "8"); code != 0 {
		t.Fatal(errs)
	}
	tests := []struct {
		name string
		args func(t *testing.T) []string
		want []string
	}{
		{"no tokenizer", func(t *testing.T) []string {
			return []string{"data", "prepare", "--input", in, "--out", filepath.Join(t.TempDir(), "x")}
		}, []string{`"tokenizer" not set`}},
		{"no input", func(t *testing.T) []string {
			return []string{"data", "prepare", "--tokenizer", "builtin:llama2", "--out", filepath.Join(t.TempDir(), "x")}
		}, []string{"no input"}},
		{"missing input", func(t *testing.T) []string {
			return []string{"data", "prepare", "--input", "nope.jsonl", "--tokenizer", "builtin:llama2", "--out", filepath.Join(t.TempDir(), "x")}
		}, []string{"nope.jsonl"}},
		{"bad mode", func(t *testing.T) []string {
			return []string{"data", "prepare", "--input", in, "--tokenizer", "builtin:llama2", "--out", filepath.Join(t.TempDir(), "x"), "--mode", "chunk"}
		}, []string{`unknown mode "chunk"`}},
		{"bad format", func(t *testing.T) []string {
			return []string{"data", "prepare", "--input", in, "--tokenizer", "builtin:llama2", "--out", filepath.Join(t.TempDir(), "x"), "--format", "csv"}
		}, []string{`unknown format "csv"`}},
		{"bad seq len", func(t *testing.T) []string {
			return []string{"data", "prepare", "--input", in, "--tokenizer", "builtin:llama2", "--out", filepath.Join(t.TempDir(), "x"), "--seq-len", "-1"}
		}, []string{"--seq-len -1: want 1 to 16777216 (0: the default)"}},
		{"strict", func(t *testing.T) []string {
			return []string{"data", "prepare", "--input", in, "--tokenizer", "builtin:llama2", "--out", filepath.Join(t.TempDir(), "x"), "--strict"}
		}, []string{in + ":6: invalid JSON"}},
		{"every record bad", func(t *testing.T) []string {
			dir := t.TempDir()
			bad := filepath.Join(dir, "bad.jsonl")
			os.WriteFile(bad, []byte("{oops\n{\"body\": \"x\"}\n"), 0o644)
			out := filepath.Join(dir, "x")
			t.Cleanup(func() {
				if entries, _ := os.ReadDir(dir); len(entries) != 1 {
					t.Errorf("the failed prepare left %v beside its input", entries)
				}
			})
			return []string{"data", "prepare", "--input", bad, "--tokenizer", "builtin:llama2", "--out", out}
		}, []string{"no document kept from", "bad.jsonl: bad records 2 (invalid-json 1, missing-field 1)", "no dataset written"}},
		{"out not empty", func(t *testing.T) []string {
			return []string{"data", "prepare", "--input", in, "--tokenizer", "builtin:llama2", "--out", good}
		}, []string{good, "not empty"}},
		{"no eos", func(t *testing.T) []string {
			p := filepath.Join(t.TempDir(), "tokenizer.json")
			os.WriteFile(p, []byte(`{"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`), 0o644)
			return []string{"data", "prepare", "--input", in, "--tokenizer", p, "--out", filepath.Join(t.TempDir(), "x"), "--eos"}
		}, []string{"no EOS token"}},
		{"inspect missing", func(t *testing.T) []string {
			return []string{"data", "inspect", filepath.Join(t.TempDir(), "none")}
		}, []string{"none: no such folder (a dataset is the folder data prepare makes"}},
		{"inspect corrupt", func(t *testing.T) []string {
			d := filepath.Join(t.TempDir(), "ds")
			os.MkdirAll(d, 0o755)
			for _, f := range []string{data.TokensFile, data.IndexFile, data.ManifestFile} {
				b, _ := os.ReadFile(filepath.Join(good, f))
				if f == data.TokensFile {
					b = b[:len(b)-8]
				}
				os.WriteFile(filepath.Join(d, f), b, 0o644)
			}
			return []string{"data", "inspect", d}
		}, []string{"tokens.bin", "truncated"}},
		{"inspect wrong tokenizer", func(t *testing.T) []string {
			return []string{"data", "inspect", good, "--tokenizer", "builtin:llama3"}
		}, []string{"builtin:llama3", "is not the dataset's"}},
		{"inspect arguments", func(t *testing.T) []string { return []string{"data", "inspect"} }, []string{"accepts 1 arg"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errs, code := memtrain(t, "", tt.args(t)...)
			if code != 1 {
				t.Fatalf("exit %d, want 1 (stdout %q)", code, out)
			}
			if strings.Count(strings.TrimSpace(errs), "\n") != 0 || !strings.HasPrefix(errs, "memtrain: ") {
				t.Errorf("error not one line: %q", errs)
			}
			for _, w := range tt.want {
				if !strings.Contains(errs, w) {
					t.Errorf("error %q lacks %q", errs, w)
				}
			}
		})
	}
}

// TestDataPrepareBOS: data prepare starts documents with BOS by default, as
// every command that tokenizes text does; --bos=false leaves it out, and a
// tokenizer without one prepares without it unless --bos asks for it.
func TestDataPrepareBOS(t *testing.T) {
	in := dataCorpus(t)
	noBOS := filepath.Join(t.TempDir(), "tokenizer.json")
	os.WriteFile(noBOS, []byte(`{"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`), 0o644)
	for _, tc := range []struct {
		name      string
		tokenizer string
		args      []string
		want      string // in data inspect's output, or the error
		code      int
	}{
		{"default", "builtin:llama2", nil, "bos yes", 0},
		{"off", "builtin:llama2", []string{"--bos=false"}, "bos no", 0},
		{"a tokenizer without BOS", noBOS, nil, "bos no", 0},
		{"asked of a tokenizer without BOS", noBOS, []string{"--bos"}, "the tokenizer has no BOS token", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := filepath.Join(t.TempDir(), "ds")
			args := append([]string{"data", "prepare", "--input", in, "--tokenizer", tc.tokenizer, "--out", ds, "--seq-len", "8"}, tc.args...)
			_, errs, code := memtrain(t, "", args...)
			if code != tc.code {
				t.Fatalf("code %d: %s", code, errs)
			}
			if code != 0 {
				if !strings.Contains(errs, tc.want) {
					t.Errorf("stderr %q lacks %q", errs, tc.want)
				}
				return
			}
			out, errs, code := memtrain(t, "", "data", "inspect", ds)
			if code != 0 || !strings.Contains(out, tc.want) {
				t.Errorf("inspect (%d, %s): %q lacks %q", code, errs, out, tc.want)
			}
		})
	}
}

func TestDataPrepareChat(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "chat.jsonl")
	os.WriteFile(in, []byte(`{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!"}]}
{"instruction":"Translate to French.","input":"cat","output":"chat"}
{"messages":[{"role":"bot","content":"x"}]}
`), 0o644)
	ds := filepath.Join(t.TempDir(), "ds")
	out, errs, code := memtrain(t, "", "data", "prepare", "--input", in, "--tokenizer", "builtin:llama3", "--out", ds,
		"--chat", "--chat-date", "2024-07-26", "--seq-len", "64", "--mode", "document")
	if code != 0 {
		t.Fatalf("prepare failed: %s", errs)
	}
	for _, want := range []string{
		"documents 2 (train 2", "targets 5,",
		"chat      template tokenizer_config.json (sha256 ", "date 2024-07-26); loss on assistant tokens only: 40 of 45 targets masked (88.9%), 5 trained",
		"bad records: 1 (bad-chat 1)", in + `:3: messages[0].role "bot": want system, user or assistant`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("prepare output lacks %q:\n%s", want, out)
		}
	}
	out, errs, code = memtrain(t, "", "data", "inspect", ds, "--tokenizer", "builtin:llama3", "--samples", "1")
	if code != 0 {
		t.Fatalf("inspect failed: %s", errs)
	}
	for _, want := range []string{"memtrain-dataset v2", "bos no", "40 of 45 targets masked", "3 targets (22 prompt targets masked)"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
	}
	jinja := filepath.Join(dir, "t.jinja")
	os.WriteFile(jinja, []byte(`{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}{% endfor %}{{ messages|length }}`), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--chat", "--bos"}, "--chat takes no --bos"},
		{[]string{"--chat", "--field", "text"}, "--chat takes no --field"},
		{[]string{"--chat-template", "builtin:llama2"}, "--chat-template needs --chat"},
		{[]string{"--chat", "--chat-date", "26/07/2024"}, `--chat-date "26/07/2024": want a date YYYY-MM-DD`},
		{[]string{"--chat", "--chat-template", "builtin:gpt"}, `chat template "builtin:gpt"`},
		{[]string{"--chat", "--chat-template", filepath.Join(dir, "none.jinja")}, "--chat-template"},
		{[]string{"--chat", "--strict"}, in + `:3: messages[0].role "bot"`},
		{[]string{"--chat", "--chat-template", jinja}, "no document kept"},
		{[]string{"--chat", "--chat-template", jinja}, "bad records 3 (bad-chat 3)"},
	} {
		args := append([]string{"data", "prepare", "--input", in, "--tokenizer", "builtin:llama3", "--out", filepath.Join(t.TempDir(), "ds"), "--seq-len", "8"}, tc.args...)
		if _, errs, code := memtrain(t, "", args...); code == 0 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: code %d, stderr %q, want %q", tc.args, code, errs, tc.want)
		}
	}
}
