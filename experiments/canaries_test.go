package experiments

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/experiments/report"
	"github.com/memtrain/memtrain/internal/inputfile"
)

// canarySpec hides 2 canaries of each of 1, 3 and 6 copies among Austen
// paragraphs: the first 5 left out, 12 read, 3 of them held out.
const canarySpec = `
name: canaries
tokenizer: builtin:llama2
base: {preset: tiny, hidden: 16, layers: 1, heads: 2, kv_heads: 2, intermediate: 32, max_positions: 128}
targets:
  data: [builtin:sotu]
  holdout: 3
  min_tokens: 30
  max_tokens: 48
  passages: true
  seed: 5
  canaries: {repetitions: [6, 1, 3], per_count: 2}
  filler: {data: [builtin:austen], skip: 5, documents: 12, holdout: 3}
train: {max_steps: 2, batch_size: 2, micro_batch: 1}
arms: [{name: standard, loss: standard}]
eval: {protocols: [{name: custom, prefix: [8], suffix: 8}]}
`

// TestCanarySpec: the counts are sorted, the target count follows from
// them, and the targets are dealt to the counts in selection order.
func TestCanarySpec(t *testing.T) {
	s, err := ParseSpec([]byte(canarySpec), "")
	if err != nil {
		t.Fatal(err)
	}
	tg := &s.Targets
	if !slices.Equal(tg.Canaries.Repetitions, []int{1, 3, 6}) || tg.Count != 6 || tg.Repeat != 1 {
		t.Errorf("canaries %+v, count %d, repeat %d", tg.Canaries, tg.Count, tg.Repeat)
	}
	var copies []int
	for i := range tg.Count {
		copies = append(copies, tg.copies(i))
	}
	if want := []int{1, 1, 3, 3, 6, 6}; !slices.Equal(copies, want) {
		t.Errorf("copies %v, want %v", copies, want)
	}
}

// TestCanaryMixing: the prepared training data holds each canary exactly
// its count of times, the training filler once each (after the skipped
// documents, without the held-out ones), and the held-out controls in the
// holdout split; the held-out filler is written beside the targets, which
// record their counts.
func TestCanaryMixing(t *testing.T) {
	s, err := ParseSpec([]byte(canarySpec), "")
	if err != nil {
		t.Fatal(err)
	}
	tok, files, err := data.OpenTokenizer("builtin:llama2")
	if err != nil {
		t.Fatal(err)
	}
	r := &Runner{Spec: s, Out: t.TempDir(), tok: tok, tokFiles: files}
	if err := r.prepareData(); err != nil {
		t.Fatal(err)
	}
	st, err := data.OpenStore(r.trainDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// The study's dataset carries its tokenizer, as data prepare's do.
	if got, err := st.Tokenizer(); err != nil || got == nil || got.Hash() != tok.Hash() {
		t.Errorf("the dataset's tokenizer: %v, %v", got, err)
	}
	key := func(ids []int32) string { return fmt.Sprint(ids) }
	train, holdout := map[string]int{}, map[string]int{}
	for id := range st.NumDocuments() {
		info, err := st.Doc(id)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := st.DocTokens(id)
		if err != nil {
			t.Fatal(err)
		}
		if info.Split == data.Train {
			train[key(ids)]++
		} else {
			holdout[key(ids)]++
		}
	}
	for i, p := range r.sel.Targets {
		if got, want := train[key(p.IDs)], []int{1, 1, 3, 3, 6, 6}[i]; got != want || p.Repetitions != want {
			t.Errorf("canary %d: %d copies in the training data, %d recorded; want %d", i, got, p.Repetitions, want)
		}
	}
	for _, p := range r.sel.Holdout {
		if holdout[key(p.IDs)] != 1 || train[key(p.IDs)] != 0 {
			t.Errorf("held-out control %s:%d: %d in holdout, %d in train", p.Source, p.Line, holdout[key(p.IDs)], train[key(p.IDs)])
		}
	}
	// The filler: Austen paragraphs 6 to 17; 3 held out, 9 trained on.
	austen, err := r.paths([]string{"builtin:austen"})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := readTexts(austen, "", 0, 17)
	if err != nil {
		t.Fatal(err)
	}
	heldText := readJSONLTexts(t, r.fillerHeldoutFile())
	if len(heldText) != 3 || len(r.fillerHeld) != 3 {
		t.Fatalf("%d held-out filler documents written, %d scored; want 3", len(heldText), len(r.fillerHeld))
	}
	enc := tok.EncodeBatch(docs.texts, tokenizer.EncodeOptions{AddSpecial: true}, 0)
	trainFiller := 0
	for i, ids := range enc {
		n := train[key(ids)] // the store keeps whole documents; a sequence is their first max_tokens
		held := slices.Contains(heldText, docs.texts[i])
		switch {
		case i < 5 && n != 0:
			t.Errorf("skipped filler document %d trained on %d times", i, n)
		case i >= 5 && held && n != 0:
			t.Errorf("held-out filler document %d trained on", i)
		case i >= 5 && !held && n != 1:
			t.Errorf("filler document %d trained on %d times, want 1", i, n)
		case i >= 5 && !held:
			trainFiller++
		}
	}
	if want := 1 + 1 + 3 + 3 + 6 + 6 + 9; trainFiller != 9 || st.NumSequences(data.Train) != want {
		t.Errorf("%d filler documents and %d training sequences, want 9 and %d", trainFiller, st.NumSequences(data.Train), want)
	}
	for _, ids := range r.fillerHeld {
		if len(ids) > s.Targets.MaxTokens {
			t.Errorf("a held-out filler document of %d tokens is scored beyond max_tokens %d", len(ids), s.Targets.MaxTokens)
		}
	}
	var recorded []int
	for _, line := range readJSONLines(t, r.targetsFile()) {
		var p struct{ Repetitions int }
		json.Unmarshal([]byte(line), &p)
		recorded = append(recorded, p.Repetitions)
	}
	if !slices.Equal(recorded, []int{1, 1, 3, 3, 6, 6}) {
		t.Errorf("targets.jsonl records repetitions %v", recorded)
	}
	// Prepared again (a resumed study): the same held-out filler.
	r2 := &Runner{Spec: s, Out: r.Out, tok: tok, tokFiles: files}
	if err := r2.prepareData(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(r2.fillerHeld) != fmt.Sprint(r.fillerHeld) {
		t.Error("a resumed study holds out other filler documents")
	}
}

func readJSONLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := inputfile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) != "" {
			out = append(out, sc.Text())
		}
	}
	return out
}

func readJSONLTexts(t *testing.T, path string) []string {
	var out []string
	for _, line := range readJSONLines(t, path) {
		var p struct{ Text string }
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Text)
	}
	return out
}

// TestRunnerCanaries runs the tiny canary study: each result records the
// canaries' counts and the held-out filler's loss after training and the
// base model's, and the report has the repetition and utility sections.
func TestRunnerCanaries(t *testing.T) {
	t.Setenv(CacheEnv, t.TempDir())
	out := filepath.Join(t.TempDir(), "study")
	spec := strings.Replace(canarySpec, "eval: {protocols", "eval: {resamples: 20, protocols", 1)
	rep, log, err := runStudy(t, spec, out, false)
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	if !strings.Contains(log, "(2 canaries × each of 1, 3, 6 copies, 9 filler)") || !strings.Contains(log, "filler: 3 documents held out for utility") {
		t.Errorf("log:\n%s", log)
	}
	results, err := report.Load(out)
	if err != nil || len(results) != 1 {
		t.Fatalf("%d results, %v", len(results), err)
	}
	r := results[0]
	if !slices.Equal(r.TargetRepetitions, []int{1, 1, 3, 3, 6, 6}) || r.FillerHeldout != 3 || !(r.FillerHeldoutLoss > 0) || !(r.BaseFillerHeldoutLoss > 0) {
		t.Errorf("result: repetitions %v, %d held-out filler documents, loss %g against the base's %g",
			r.TargetRepetitions, r.FillerHeldout, r.FillerHeldoutLoss, r.BaseFillerHeldoutLoss)
	}
	md, err := os.ReadFile(rep.Markdown)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Utility on held-out filler", "## Memorization against repetitions", "| standard | 6 | 6 | 2 |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
}
