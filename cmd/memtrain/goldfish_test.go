package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/goldfish"
)

type goldfishLine struct {
	IDs      []int32  `json:"ids"`
	Drop     []int    `json:"drop"`
	Dropped  *int     `json:"dropped"`
	Fraction *float64 `json:"fraction"`
}

func parseGoldfishOutput(t *testing.T, out string) []goldfishLine {
	t.Helper()
	var recs []goldfishLine
	for i, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var r goldfishLine
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("output line %d %q: %v", i+1, line, err)
		}
		if r.IDs == nil || r.Drop == nil || r.Dropped == nil || r.Fraction == nil {
			t.Fatalf("output line %d %q: a field is missing", i+1, line)
		}
		recs = append(recs, r)
	}
	return recs
}

func TestGoldfishJSON(t *testing.T) {
	ids := []int32{128000, 791, 4062, 14198, 39935, 35308, 927, 279, 16053, 5679, 13, 578, 4062, 14198, 39935, 35308, 927, 279, 16053, 5679, 13}
	b, _ := json.Marshal(map[string]any{"input_ids": ids})
	in := `{"ids":[5,6]}` + "\n\n" + string(b) + "\n" + string(b) + "\n" + `{"ids":[]}` + "\n" + `{"ids":[42]}` + "\n"
	for _, strategy := range []string{"hash-table", "hash-avalanche"} {
		out, errs, code := memtrain(t, in, "goldfish", "--strategy", strategy, "--k", "3", "--h", "2")
		if code != 0 {
			t.Fatal(errs)
		}
		if errs != "" {
			t.Errorf("stderr without --show: %q", errs)
		}
		recs := parseGoldfishOutput(t, out)
		if len(recs) != 5 {
			t.Fatalf("%d output lines for 5 input lines (one blank):\n%s", len(recs), out)
		}
		s, _ := goldfish.ParseStrategy(strategy)
		m, err := goldfish.New(goldfish.Config{Strategy: s, K: 3, H: 2})
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range recs {
			if len(r.Drop) != len(r.IDs) {
				t.Fatalf("line %d: %d drops for %d ids", i, len(r.Drop), len(r.IDs))
			}
			// The mask is the package's, on the targets ids[1:].
			want := []int{}
			if len(r.IDs) > 0 {
				w := make([]float32, len(r.IDs)-1)
				m.Mask(r.IDs[1:], w)
				want = append(want, 0)
				for _, v := range w {
					want = append(want, int(1-v))
				}
			}
			n := 0
			for _, d := range r.Drop {
				n += d
			}
			if !slices.Equal(r.Drop, want) || *r.Dropped != n {
				t.Errorf("%s line %d: drop %v (%d), want %v", strategy, i, r.Drop, *r.Dropped, want)
			}
			wantFrac := 0.0
			if len(r.IDs) > 1 {
				wantFrac = float64(n) / float64(len(r.IDs)-1)
			}
			if *r.Fraction != wantFrac {
				t.Errorf("line %d: fraction %v, want %v", i, *r.Fraction, wantFrac)
			}
		}
		if !slices.Equal(recs[1].IDs, ids) || !slices.Equal(recs[1].Drop, recs[2].Drop) {
			t.Errorf("the same document twice: %v and %v", recs[1].Drop, recs[2].Drop)
		}
		if *recs[1].Dropped == 0 {
			t.Errorf("%s: nothing dropped from 20 targets at k=3", strategy)
		}
	}
}

func TestGoldfishStaticAndTargets(t *testing.T) {
	in := `{"ids":[10,11,12,13,14,15,16,17,18]}`
	out, errs, code := memtrain(t, in, "goldfish", "--strategy", "static", "--k", "4", "--start", "1")
	if code != 0 {
		t.Fatal(errs)
	}
	// Targets 11…18 at positions 0…7; positions 1 and 5 are ids[2], ids[6].
	if want := `{"ids":[10,11,12,13,14,15,16,17,18],"drop":[0,0,1,0,0,0,1,0,0],"dropped":2,"fraction":0.25}` + "\n"; out != want {
		t.Errorf("static:\n got %s\nwant %s", out, want)
	}
	out, errs, code = memtrain(t, in, "goldfish", "--strategy", "static", "--k", "4", "--as-targets")
	if code != 0 {
		t.Fatal(errs)
	}
	if want := `{"ids":[10,11,12,13,14,15,16,17,18],"drop":[1,0,0,0,1,0,0,0,1],"dropped":3,"fraction":0.3333333333333333}` + "\n"; out != want {
		t.Errorf("--as-targets:\n got %s\nwant %s", out, want)
	}
}

func TestGoldfishText(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "docs.jsonl")
	doc := "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife."
	b, _ := json.Marshal(map[string]string{"body": doc})
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errs, code := memtrain(t, "", "goldfish", "--tokenizer", "builtin:llama3", "--input", path, "--field", "body")
	if code != 0 {
		t.Fatal(errs)
	}
	recs := parseGoldfishOutput(t, out)
	if len(recs) != 1 || recs[0].IDs[0] != 128000 || len(recs[0].IDs) < 20 {
		t.Fatalf("want one line of Llama 3 ids after BOS: %s", out)
	}
	out, errs, code = memtrain(t, "", "goldfish", "--tokenizer", "builtin:llama3", "--input", path, "--field", "body", "--bos=false")
	if code != 0 {
		t.Fatal(errs)
	}
	noBOS := parseGoldfishOutput(t, out)
	if !slices.Equal(noBOS[0].IDs, recs[0].IDs[1:]) {
		t.Errorf("--bos=false: %v", noBOS[0].IDs)
	}
}

func TestGoldfishShow(t *testing.T) {
	doc := "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife. Café, naïve ☕."
	b, _ := json.Marshal(map[string]string{"text": doc})
	in := string(b) + "\n" + string(b) + "\n"
	for _, tk := range []string{"builtin:llama3", "builtin:llama2"} {
		out, errs, code := memtrain(t, in, "goldfish", "--tokenizer", tk, "--k", "2", "--h", "1", "--show")
		if code != 0 {
			t.Fatal(errs)
		}
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 2 || lines[0] != lines[1] {
			t.Fatalf("%s: want the same line twice:\n%s", tk, out)
		}
		if !strings.Contains(lines[0], "[[") || strings.Contains(lines[0], "\x1b[") {
			t.Errorf("%s: no bracketed drops (not a terminal):\n%s", tk, lines[0])
		}
		// Without the brackets, the line is the decoded text.
		plain := strings.NewReplacer("[[", "", "]]", "").Replace(lines[0])
		bos := map[string]string{"builtin:llama3": "<|begin_of_text|>", "builtin:llama2": "<s> "}[tk]
		if plain != bos+doc {
			t.Errorf("%s: text with the brackets removed:\n got %q\nwant %q", tk, plain, bos+doc)
		}
		if !strings.HasPrefix(errs, "goldfish: hash-table k=2 h=1: dropped ") || !strings.HasSuffix(errs, " on 2 lines\n") {
			t.Errorf("%s: summary %q", tk, errs)
		}
	}
	// Ids without a tokenizer show as ids.
	out, errs, code := memtrain(t, `{"ids":[10,11,12,13,14]}`, "goldfish", "--strategy", "static", "--k", "2", "--show")
	if code != 0 || out != "10 [[11]] 12 [[13]] 14\n" {
		t.Errorf("ids --show: %q (%s)", out, errs)
	}
	if want := "goldfish: static k=2 start=0: dropped 2 of 4 targets (50.00%; 1/k = 50.00%) on 1 line\n"; errs != want {
		t.Errorf("summary %q, want %q", errs, want)
	}
}

func TestGoldfishErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte("{\"ids\":[1,2]}\n\n{\"ids\":[1,\n"), 0o644)
	for _, tc := range []struct {
		stdin string
		args  []string
		want  string
	}{
		{"", []string{"--k", "1"}, "memtrain: goldfish: --k 1: want 2 to 1000000000"},
		{"", []string{"--h", "0"}, "memtrain: goldfish: --h 0: want 1 to 1000000000"},
		{"", []string{"--strategy", "static", "--start", "-2"}, "memtrain: goldfish: --start -2: want 0 to 1000000000"},
		{"", []string{"--strategy", "seeded_random"}, `memtrain: goldfish: unknown strategy "seeded_random" (want static, hash-table or hash-avalanche)`},
		{"", []string{"--strategy", "static", "--h", "4"}, "memtrain: goldfish: --h applies to the hash strategies, not to static"},
		{"", []string{"--start", "4"}, "memtrain: goldfish: --start applies to the static strategy, not to hash-table"},
		{"", []string{"--input", bad}, "memtrain: goldfish: " + bad + ":3: invalid JSON at byte 10: unexpected end of JSON input"},
		{"{\"ids\":[1]}\nnot json\n", nil, "memtrain: goldfish: stdin:2: invalid JSON: want an object, got null"},
		{`{"text":"hello"}`, nil, "memtrain: goldfish: stdin:1: a text line needs --tokenizer"},
		{`{"ids":["a"]}`, nil, `memtrain: goldfish: stdin:1: element 0 of "ids" is a string, want an integer`},
		{`{"input_ids":[1,4294967296]}`, nil, `memtrain: goldfish: stdin:1: element 1 of "input_ids": token id 4294967296 out of range`},
		{`{"body":"x"}`, nil, `memtrain: goldfish: stdin:1: no field "ids", "input_ids" or "text"`},
		{`{"text":3}`, []string{"--tokenizer", "builtin:llama3"}, `memtrain: goldfish: stdin:1: field "text" is a number, want a string`},
		{"", []string{"--input", filepath.Join(dir, "missing.jsonl")}, "memtrain: goldfish: open " + filepath.Join(dir, "missing.jsonl") + ": no such file or directory"},
		{"", []string{"--tokenizer", "builtin:gpt9"}, `memtrain: unknown builtin tokenizer "gpt9" (want builtin:llama2 or builtin:llama3)`},
	} {
		out, errs, code := memtrain(t, tc.stdin, append([]string{"goldfish"}, tc.args...)...)
		if code != 1 || strings.TrimSuffix(errs, "\n") != tc.want {
			t.Errorf("%v: code %d, stderr %q, want %q", tc.args, code, errs, tc.want)
		}
		if strings.Count(errs, "\n") > 1 {
			t.Errorf("%v: error of more than one line: %q", tc.args, errs)
		}
		_ = out
	}
}
