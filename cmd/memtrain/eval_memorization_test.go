package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/internal/numtest"
	"github.com/memtrain/memtrain/memorization"
)

func TestEvalMemorization(t *testing.T) {
	base, ds := finetuneFixture(t, "builtin:llama2")
	out := filepath.Join(t.TempDir(), "eval")
	stdout, errs, code := memtrain(t, "", "eval", "memorization", "--model", base, "--data", ds, "--protocol", "pythia",
		"--prefix", "8", "--suffix", "8", "--limit", "4", "--out", out, "--threads", "2")
	if code != 0 {
		t.Fatal(errs)
	}
	for _, want := range []string{"pythia(prefix 8, suffix 8): 8 documents (4 members, 4 non-members)", "non-members",
		"membership inference  ROC AUC  TPR at 1% FPR %  TPR at 0.1% FPR %", "(4 non-members: 0 false positives allowed at 1% FPR, none at 0.1%)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	s, err := memorization.ReadSummary(filepath.Join(out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Members != 4 || s.NonMembers != 4 || len(s.Prefixes) != 1 || s.Prefixes[0].K != 8 {
		t.Errorf("summary %+v", s)
	}
	raw, err := os.ReadFile(filepath.Join(out, "docs.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != 8 {
		t.Fatalf("%d lines in docs.jsonl", len(lines))
	}
	var d memorization.DocResult
	if err := json.Unmarshal([]byte(lines[0]), &d); err != nil || len(d.Probes) != 1 || len(d.Probes[0].Suffix) != 8 || !(d.Loss > 0) {
		t.Errorf("first document %+v (%v)", d, err)
	}

	// An earlier result is not replaced in silence (issue 33, item 6).
	again := []string{"eval", "memorization", "--model", base, "--data", ds, "--protocol", "pythia",
		"--prefix", "8", "--suffix", "8", "--limit", "4", "--out", out, "--threads", "2"}
	_, errs, code = memtrain(t, "", again...)
	if want := "memtrain: eval memorization: " + out + " holds an earlier result (summary.json): give another --out, or --force to replace it\n"; code != 1 || errs != want {
		t.Errorf("a second run into %s: exit %d, %q; want %q", out, code, errs, want)
	}
	if _, errs, code = memtrain(t, "", append(again, "--force")...); code != 0 {
		t.Errorf("--force: exit %d, %s", code, errs)
	}

	// Input files: members and non-members from JSONL.
	dir := t.TempDir()
	mem := writeFile(t, "m.jsonl", `{"text":"It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife."}`+"\n")
	non := writeFile(t, "n.jsonl", `{"text":"However little known the feelings or views of such a man may be on his first entering a neighbourhood, this truth is so well fixed."}`+"\n")
	stdout, errs, code = memtrain(t, "", "eval", "memorization", "--model", base, "--data", mem, "--non-members", non,
		"--protocol", "custom", "--prefix", "6", "--suffix", "4", "--out", filepath.Join(dir, "e"))
	if code != 0 || !strings.Contains(stdout, "2 documents (1 members, 1 non-members), 0 skipped") {
		t.Errorf("files: %s %s", stdout, errs)
	}
}

func TestEvalMemorizationErrors(t *testing.T) {
	base, ds := finetuneFixture(t, "builtin:llama2")
	out := filepath.Join(t.TempDir(), "e")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--protocol", "nope"}, `unknown protocol "nope"`},
		{[]string{"--protocol", "custom", "--prefix", "4"}, "needs one prefix length and a suffix length"},
		{[]string{"--protocol", "custom", "--prefix", "30", "--suffix", "30", "--strict"}, "too short for custom(prefix 30, suffix 30) (strict)"},
		{[]string{"--protocol", "custom", "--prefix", "300", "--suffix", "300"}, "no document has enough tokens"},
		{[]string{"--split", "test"}, `split "test"`},
		{[]string{"--non-members", "x.jsonl"}, "--non-members goes with input files"},
		{[]string{"--samples", "-1"}, "--samples -1: want 1 to 100000 (0: greedy only)"},
		{[]string{"--samples", "2", "--temperature", "0"}, "--temperature 0: want a number above 0"},
		{[]string{"--temperature", "-0.5"}, "--temperature -0.5: want a number above 0"},
		{[]string{"--top-k", "-1"}, "--top-k -1: want 1 to 4194304 (0: the whole vocabulary)"},
	} {
		args := append([]string{"eval", "memorization", "--model", base, "--data", ds, "--out", out}, tc.args...)
		_, errs, code := memtrain(t, "", args...)
		if code != 1 || !strings.Contains(errs, tc.want) || strings.Count(strings.TrimSpace(errs), "\n") > 0 {
			t.Errorf("%v: exit %d, %q; want one line with %q", tc.args, code, errs, tc.want)
		}
	}
}

// TestEvalMemorizationParallel: on a grid the results equal one rank's.
func TestEvalMemorizationParallel(t *testing.T) {
	base, ds := finetuneFixture(t, "builtin:llama2")
	dir := t.TempDir()
	read := func(out string) *memorization.Summary {
		s, err := memorization.ReadSummary(filepath.Join(out, "summary.json"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	args := []string{"eval", "memorization", "--model", base, "--data", ds, "--protocol", "pythia", "--prefix", "8", "--suffix", "8", "--limit", "3",
		"--samples", "3", "--temperature", "1.5", "--top-k", "20", "--seed", "4"}
	one := filepath.Join(dir, "one")
	if _, errs, code := memtrain(t, "", append(args, "--out", one)...); code != 0 {
		t.Fatal(errs)
	}
	grid := filepath.Join(dir, "grid")
	if _, errs, code := memtrain(t, "", append(args, "--out", grid, "--parallel", "dp=2,x=2,z=2")...); code != 0 {
		t.Fatal(errs)
	}
	a, b := read(one), read(grid)
	pa, pb := a.Prefixes[0], b.Prefixes[0]
	if pa.Members.Exact != pb.Members.Exact || pa.Members.TokenMatch != pb.Members.TokenMatch || pa.NonMembers.TokenMatch != pb.NonMembers.TokenMatch {
		t.Errorf("extraction differs on the grid:\n%+v\n%+v", pa, pb)
	}
	if pa.Members.Sampled == nil || pb.Members.Sampled == nil || *pa.Members.Sampled != *pb.Members.Sampled || *pa.NonMembers.Sampled != *pb.NonMembers.Sampled {
		t.Errorf("sampled extraction differs on the grid:\n%+v\n%+v", pa.Members.Sampled, pb.Members.Sampled)
	}
	if err := numtest.Scalar(pb.Members.Loss.Mean, pa.Members.Loss.Mean, numtest.Tol{Rel: 1e-4}); err != nil {
		t.Errorf("member loss on the grid against one rank: %v", err)
	}
	if _, errs, code := memtrain(t, "", append(args, "--out", grid, "--force", "--parallel", "x=3")...); code != 1 || !strings.Contains(errs, "--parallel") {
		t.Errorf("bad grid: exit %d %q", code, errs)
	}
}

// TestEvalMemorizationReference: --reference-model (two tiny random
// checkpoints of one tokenizer) adds the reference attack to the summary,
// docs.jsonl and the table; a missing or mismatched reference is one line.
func TestEvalMemorizationReference(t *testing.T) {
	base, ds := finetuneFixture(t, "builtin:llama2")
	ref := filepath.Join(t.TempDir(), "ref")
	if _, errs, code := memtrain(t, "", "init", "--out", ref, "--tokenizer", "builtin:llama2", "--hidden", "16", "--layers", "1",
		"--heads", "2", "--kv-heads", "1", "--intermediate", "32", "--seed", "11"); code != 0 {
		t.Fatal(errs)
	}
	out := filepath.Join(t.TempDir(), "eval")
	args := []string{"eval", "memorization", "--model", base, "--data", ds, "--protocol", "pythia", "--prefix", "8", "--suffix", "8", "--limit", "4"}
	stdout, errs, code := memtrain(t, "", append(args, "--out", out, "--reference-model", ref)...)
	if code != 0 {
		t.Fatal(errs)
	}
	if !strings.Contains(stdout, "reference (loss − reference loss)") {
		t.Errorf("table lacks the reference attack:\n%s", stdout)
	}
	s, err := memorization.ReadSummary(filepath.Join(out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !s.MIA.Reference || !(s.MIA.RefAUC > 0 && s.MIA.RefAUC <= 1) {
		t.Errorf("MIA %+v", s.MIA)
	}
	raw, err := os.ReadFile(filepath.Join(out, "docs.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var d memorization.DocResult
	if err := json.Unmarshal([]byte(strings.SplitN(string(raw), "\n", 2)[0]), &d); err != nil || d.RefLoss == nil || !(*d.RefLoss > 0) {
		t.Errorf("first document %+v (%v): want a reference loss", d, err)
	}
	// The reference attack is the members' loss against the reference's:
	// with the model itself as reference every score is 0, chance.
	self := filepath.Join(t.TempDir(), "self")
	if _, errs, code := memtrain(t, "", append(args, "--out", self, "--reference-model", base)...); code != 0 {
		t.Fatal(errs)
	} else if s, err := memorization.ReadSummary(filepath.Join(self, "summary.json")); err != nil || s.MIA.RefAUC != 0.5 || s.MIA.RefTPR1 != 0 {
		t.Errorf("self reference: %+v (%v), want AUC 0.5 and TPR 0", s.MIA, err)
	}
	// Another tokenizer: another vocabulary, or the same size and another
	// tokenizer.json.
	other := filepath.Join(t.TempDir(), "llama3")
	if _, errs, code := memtrain(t, "", "init", "--out", other, "--tokenizer", "builtin:llama3", "--hidden", "16", "--layers", "1",
		"--heads", "2", "--kv-heads", "1", "--intermediate", "32"); code != 0 {
		t.Fatal(errs)
	}
	edited := filepath.Join(t.TempDir(), "edited")
	if err := os.MkdirAll(edited, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(ref, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "tokenizer.json" {
			b = append(b, '\n')
		}
		if err := os.WriteFile(filepath.Join(edited, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ ref, want string }{
		{filepath.Join(t.TempDir(), "none"), "eval memorization: --reference-model: model "},
		{other, "vocabulary of 128256 tokens, the model's 32000: want the same tokenizer"},
		{edited, "tokenizer.json differs from the model's"},
	} {
		_, errs, code := memtrain(t, "", append(args, "--out", out, "--force", "--reference-model", tc.ref)...)
		if code != 1 || !strings.Contains(errs, tc.want) || strings.Count(strings.TrimSpace(errs), "\n") > 0 {
			t.Errorf("reference %s: exit %d, %q; want one line with %q", tc.ref, code, errs, tc.want)
		}
	}
}

// TestEvalMemorizationSampling: --samples adds probabilistic extraction,
// the same for a seed whatever the batch; at top-k 1 it is greedy's.
func TestEvalMemorizationSampling(t *testing.T) {
	base, ds := finetuneFixture(t, "builtin:llama2")
	dir := t.TempDir()
	args := []string{"eval", "memorization", "--model", base, "--data", ds, "--protocol", "pythia", "--prefix", "8", "--suffix", "4", "--limit", "3"}
	read := func(out string) *memorization.Summary {
		t.Helper()
		s, err := memorization.ReadSummary(filepath.Join(out, "summary.json"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	docs := func(out string) string {
		t.Helper()
		raw, err := os.ReadFile(filepath.Join(out, "docs.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	stdout, errs, code := memtrain(t, "", append(args, "--out", a, "--samples", "4", "--temperature", "0.7", "--seed", "3", "--batch", "8")...)
	if code != 0 {
		t.Fatal(errs)
	}
	if !strings.Contains(stdout, "probabilistic extraction: 4 samples a document at temperature 0.7, top-k 0 (the whole vocabulary), seed 3") ||
		!strings.Contains(stdout, "extraction probability %") {
		t.Errorf("output lacks probabilistic extraction:\n%s", stdout)
	}
	if _, errs, code := memtrain(t, "", append(args, "--out", b, "--samples", "4", "--temperature", "0.7", "--seed", "3", "--batch", "3")...); code != 0 {
		t.Fatal(errs)
	}
	if docs(a) != docs(b) {
		t.Error("batch 8 and batch 3 sampled differently")
	}
	s := read(a)
	if s.Sampling == nil || s.Sampling.Samples != 4 || s.Prefixes[0].Members.Sampled == nil {
		t.Errorf("summary %+v", s)
	}
	g := filepath.Join(dir, "greedy")
	if _, errs, code := memtrain(t, "", append(args, "--out", g, "--samples", "2", "--top-k", "1", "--temperature", "5")...); code != 0 {
		t.Fatal(errs)
	}
	for _, grp := range []memorization.Group{read(g).Prefixes[0].Members, read(g).Prefixes[0].NonMembers} {
		if grp.Sampled.Extracted.Mean != grp.Exact.Mean || grp.Sampled.Probability.Mean != grp.Exact.Mean {
			t.Errorf("top-k 1: sampled %+v, greedy exact %v", grp.Sampled, grp.Exact.Mean)
		}
	}
}

// chatConversations are the conversations of the chat tests: multi-turn,
// with and without a system prompt, alpaca records, and a one-word answer
// (" Yes </s>", 3 tokens) that an answer prefix of 3 leaves no probe.
const chatConversations = `{"messages":[{"role":"system","content":"You are a terse assistant."},{"role":"user","content":"What is the capital of France?"},{"role":"assistant","content":"Paris is the capital of France."},{"role":"user","content":"And of Italy?"},{"role":"assistant","content":"Rome."}]}
{"messages":[{"role":"user","content":"Name a colour."},{"role":"assistant","content":"Blue, like the sky on a clear summer morning."}]}
{"messages":[{"role":"system","content":"Answer in one word."},{"role":"user","content":"Is water wet?"},{"role":"assistant","content":"Yes"}]}
{"instruction":"Translate to French.","input":"The cat sleeps on the mat.","output":"Le chat dort sur le tapis."}
{"messages":[{"role":"user","content":"Count to five."},{"role":"assistant","content":"One, two, three, four, five."},{"role":"user","content":"Now backwards."},{"role":"assistant","content":"Five, four, three, two, one."}]}
{"instruction":"Give a synonym for happy.","output":"Joyful, cheerful or content, depending on the shade of meaning."}
{"messages":[{"role":"user","content":"Who wrote Pride and Prejudice?"},{"role":"assistant","content":"Jane Austen wrote it, and it was published in 1813."}]}
{"instruction":"List three fruits.","output":"Apples, pears and plums."}
`

// chatFixture is a tiny random Llama 2 model and a chat dataset of
// chatConversations (data prepare --chat, Llama 2's template; 3 train
// and 5 holdout conversations, 10 answers).
func chatFixture(t *testing.T) (base, ds string) {
	t.Helper()
	dir := t.TempDir()
	base = filepath.Join(dir, "base")
	if _, errs, code := memtrain(t, "", "init", "--out", base, "--tokenizer", "builtin:llama2", "--hidden", "32", "--layers", "2",
		"--heads", "4", "--kv-heads", "2", "--intermediate", "64", "--seed", "3"); code != 0 {
		t.Fatal(errs)
	}
	in := filepath.Join(dir, "chat.jsonl")
	if err := os.WriteFile(in, []byte(chatConversations), 0o644); err != nil {
		t.Fatal(err)
	}
	ds = filepath.Join(dir, "ds")
	if _, errs, code := memtrain(t, "", "data", "prepare", "--input", in, "--tokenizer", "builtin:llama2", "--chat", "--chat-template", "builtin:llama2",
		"--out", ds, "--seq-len", "128", "--mode", "document", "--holdout", "0.4", "--seed", "1"); code != 0 {
		t.Fatal(errs)
	}
	return base, ds
}

// memorizedChat writes a copy of the chat dataset ds whose train
// conversations' answers are the model's own greedy continuations of the
// conversation before them (up to EOS or the answer's length), as a model
// that memorized them answers: what the chat protocol extracts exactly.
func memorizedChat(t *testing.T, base, ds string) string {
	t.Helper()
	dev, err := launch.ParseDevice("cpu")
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := launch.NewBackend(dev, 2, "go")
	if err != nil {
		t.Fatal(err)
	}
	lm, err := finetune.LoadWithTokenizer(b, finetune.ModelRef{Dir: base}, llama.Options{}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer lm.Model.Free()
	eos, _ := lm.Tokenizer.EOS()
	s, err := data.OpenStore(ds)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := s.Manifest()
	out := filepath.Join(t.TempDir(), "memorized")
	w, err := data.CreateStore(out, m.Tokenizer, m.Settings)
	if err != nil {
		t.Fatal(err)
	}
	for id := range s.NumDocuments() {
		info, _ := s.Doc(id)
		ids, _ := s.DocTokens(id)
		mask, _ := s.DocMask(id)
		doc := data.Document{Source: info.Source, Line: info.Line, Split: info.Split, IDs: ids, Mask: mask}
		if info.Split == data.Train {
			doc.IDs, doc.Mask = nil, nil
			for a := 0; a < len(ids); {
				b := a + 1
				for b < len(ids) && mask[b] == mask[a] {
					b++
				}
				run := ids[a:b]
				if mask[a] == 1 {
					gen, err := lm.Model.Generate([][]int32{doc.IDs}, llama.GenerateOptions{MaxNewTokens: b - a, StopIDs: []int32{eos}})
					if err != nil {
						t.Fatal(err)
					}
					run = gen[0]
				}
				doc.IDs = append(doc.IDs, run...)
				for range run {
					doc.Mask = append(doc.Mask, mask[a])
				}
				a = b
			}
		}
		if _, err := w.Add(doc); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Commit(m.Sources, &m.Problems); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestEvalMemorizationChat: --protocol chat on a chat dataset made by data
// prepare --chat: a probe per assistant answer, members and non-members
// from its splits, well-formed results files; answers of no more than
// --prefix tokens counted; a model whose answers are its own greedy
// continuations has every member answer extracted, greedily and by
// samples at top-k 1.
func TestEvalMemorizationChat(t *testing.T) {
	base, ds := chatFixture(t)
	out := filepath.Join(t.TempDir(), "eval")
	stdout, errs, code := memtrain(t, "", "eval", "memorization", "--model", base, "--data", ds, "--protocol", "chat",
		"--prefix", "3", "--suffix", "8", "--out", out, "--threads", "2", "--resamples", "50")
	if code != 0 {
		t.Fatal(errs)
	}
	for _, want := range []string{"chat(prompt + 3 answer tokens, suffix 8): 8 documents (3 members, 5 non-members), 1 skipped as too short; 1 answers too short for a probe",
		"prompt+3", "non-members", "membership inference"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	s, err := memorization.ReadSummary(filepath.Join(out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "chat" || s.Members != 3 || s.NonMembers != 5 || s.Skipped != 1 || s.SkippedAnswers != 1 || s.SuffixLen != 8 || len(s.Prefixes) != 1 || s.Prefixes[0].K != 3 {
		t.Fatalf("summary %+v", s)
	}
	probes := 0
	for _, g := range []memorization.Group{s.Prefixes[0].Members, s.Prefixes[0].NonMembers} {
		probes += g.Documents
		for _, iv := range []memorization.Interval{g.Exact, g.TokenMatch, g.RougeLTokens, g.RougeLWords} {
			if !(iv.Lo >= 0 && iv.Lo <= iv.Mean && iv.Mean <= iv.Hi && iv.Hi <= 1) {
				t.Errorf("interval %+v of %+v", iv, g)
			}
		}
		if !(g.Loss.Mean > 0) || math.IsInf(g.Perplexity, 0) || g.Documents == 0 {
			t.Errorf("group %+v", g)
		}
	}
	if probes != 9 {
		t.Errorf("%d probes, want 9 (10 answers, 1 too short)", probes)
	}
	if a := s.MIA.LossAUC; !(a >= 0 && a <= 1) {
		t.Errorf("loss AUC %v", a)
	}
	raw, err := os.ReadFile(filepath.Join(out, "docs.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != 8 {
		t.Fatalf("%d lines in docs.jsonl", len(lines))
	}
	answers := 0
	for i, line := range lines {
		var d memorization.DocResult
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatal(err)
		}
		answers += len(d.Probes) + d.ShortAnswers
		if d.Skipped != "" {
			if d.ShortAnswers != 1 || len(d.Probes) != 0 || !strings.Contains(d.Skipped, "no answer of more than 3 tokens (1 answers)") {
				t.Errorf("document %d: %+v", i, d)
			}
			continue
		}
		for j, pr := range d.Probes {
			if pr.Answer != j+1+d.ShortAnswers && pr.Answer != j+1 || pr.K <= 3 || len(pr.Suffix) == 0 || len(pr.Suffix) > 8 || len(pr.Pred) > len(pr.Suffix) ||
				!(pr.TokenMatch >= 0 && pr.TokenMatch <= 1) || !(pr.RougeLIDs >= 0 && pr.RougeLIDs <= 1) {
				t.Errorf("document %d probe %d: %+v", i, j, pr)
			}
			if j > 0 && pr.K <= d.Probes[j-1].K {
				t.Errorf("document %d: probes out of order", i)
			}
		}
		if !(d.Loss > 0) || !(d.MinK < 0) {
			t.Errorf("document %d: loss %v, min-k %v", i, d.Loss, d.MinK)
		}
	}
	if answers != 10 {
		t.Errorf("%d answers in docs.jsonl, want 10", answers)
	}

	// The model's own answers are extracted, every one of them.
	mem := memorizedChat(t, base, ds)
	out = filepath.Join(t.TempDir(), "memorized")
	if _, errs, code := memtrain(t, "", "eval", "memorization", "--model", base, "--data", mem, "--protocol", "chat",
		"--out", out, "--threads", "2", "--blas", "go", "--resamples", "50", "--samples", "2", "--top-k", "1"); code != 0 {
		t.Fatal(errs)
	}
	if s, err = memorization.ReadSummary(filepath.Join(out, "summary.json")); err != nil {
		t.Fatal(err)
	}
	g := s.Prefixes[0]
	if s.Protocol != "chat(prompt + 0 answer tokens, suffix 50)" || g.K != 0 || g.Members.Documents != 4 || g.Members.Exact.Mean != 1 || g.Members.TokenMatch.Mean != 1 || g.NonMembers.Exact.Mean == 1 {
		t.Errorf("memorized answers: %+v", g)
	}
	// Sampling from the most likely token alone is greedy decoding.
	if sm := g.Members.Sampled; sm == nil || sm.Extracted.Mean != 1 || sm.Probability.Mean != 1 {
		t.Errorf("memorized answers, sampled at top-k 1: %+v", sm)
	}
}

// TestEvalMemorizationChatErrors: the chat protocol's refusals are one
// line each: a dataset without a loss mask (named), input files, two
// answer prefixes.
func TestEvalMemorizationChatErrors(t *testing.T) {
	base, ds := finetuneFixture(t, "builtin:llama2")
	in := writeFile(t, "m.jsonl", `{"text":"It is a truth universally acknowledged."}`+"\n")
	out := filepath.Join(t.TempDir(), "e")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--data", ds}, "the chat protocol needs a chat dataset (memtrain data prepare --chat): " + ds + " has no loss mask"},
		{[]string{"--data", in}, "the chat protocol reads a chat dataset (memtrain data prepare --chat), not input files: " + in},
		{[]string{"--data", ds, "--prefix", "1,2"}, "chat protocol: one answer prefix length, got 2"},
		{[]string{"--data", ds, "--prefix", "-1"}, "chat protocol: answer prefix lengths [-1] (want one length ≥ 0)"},
	} {
		args := append([]string{"eval", "memorization", "--model", base, "--protocol", "chat", "--out", out}, tc.args...)
		_, errs, code := memtrain(t, "", args...)
		if code != 1 || !strings.Contains(errs, tc.want) || strings.Count(strings.TrimSpace(errs), "\n") > 0 {
			t.Errorf("%v: exit %d, %q; want one line with %q", tc.args, code, errs, tc.want)
		}
	}
}
