package memorization

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/internal/numtest"
)

func tinyModel(t *testing.T) *llama.Model {
	t.Helper()
	cfg := &checkpoints.Config{
		HiddenSize: 16, IntermediateSize: 32, NumHiddenLayers: 2, NumAttentionHeads: 4, NumKeyValueHeads: 2,
		RMSNormEps: 1e-5, RopeTheta: 10000, MaxPositionEmbeddings: 96, VocabSize: 31,
		TorchDType: "float32", HiddenAct: "silu", InitializerRange: 0.5,
	}
	m, err := llama.New(cpu.New(cpu.Options{Threads: 2}), cfg, llama.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Free)
	if err := m.SetWeights(checkpoints.RandomWeights(cfg, 3)); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestEvaluate: documents that are the model's own greedy continuations
// are members extracted verbatim; random documents are not, and the
// membership scores separate the two sets.
func TestEvaluate(t *testing.T) {
	m := tinyModel(t)
	random := randomIDs(rand.New(rand.NewPCG(1, 2)))
	var docs []Document
	for i := range 6 {
		prompt := random(10 + i)
		gen, err := m.Generate([][]int32{prompt}, llama.GenerateOptions{MaxNewTokens: 8})
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, Document{ID: i, Member: true, IDs: append(prompt, gen[0]...)})
	}
	for i := range 6 {
		docs = append(docs, Document{ID: 6 + i, IDs: random(18 + i)})
	}
	docs = append(docs, Document{ID: 12, IDs: random(5)}) // too short
	p := Custom(10, 8)
	p.Name = "goldfish" // suffix = the last 8 tokens
	p.PrefixLens, p.MinTokens = nil, 9
	var calls int
	sum, res, err := Evaluate(m, docs, EvalConfig{Protocol: p, Batch: 4, Bootstrap: Bootstrap{Seed: 7},
		Progress: func(int, int, int, int) { calls++ }})
	if err != nil {
		t.Fatal(err)
	}
	if calls == 0 {
		t.Error("no progress reported")
	}
	if sum.Documents != 13 || sum.Members != 6 || sum.NonMembers != 7 || sum.Skipped != 1 {
		t.Fatalf("counts %+v", sum)
	}
	if res[12].Skipped == "" || len(res[12].Probes) != 0 {
		t.Errorf("short document not skipped: %+v", res[12])
	}
	if len(sum.Prefixes) != 1 || sum.Prefixes[0].K != 0 {
		t.Fatalf("prefixes %+v", sum.Prefixes)
	}
	mem, non := sum.Prefixes[0].Members, sum.Prefixes[0].NonMembers
	if mem.Documents != 6 || mem.Exact.Mean != 1 || mem.TokenMatch.Mean != 1 || mem.RougeLTokens.Mean != 1 || mem.PrefixMatch.Mean != 8 {
		t.Errorf("members %+v, want everything extracted", mem)
	}
	if non.Documents != 6 || non.Exact.Mean != 0 {
		t.Errorf("non-members %+v, want nothing extracted", non)
	}
	if !(non.Loss.Mean > mem.Loss.Mean) || !(sum.MIA.LossAUC >= 0.9) {
		t.Errorf("member loss %v, non-member %v, AUC %v", mem.Loss, non.Loss, sum.MIA.LossAUC)
	}
	if err := numtest.Scalar(mem.Perplexity, math.Exp(mem.Loss.Mean), numtest.Tol{Abs: 1e-12}); err != nil {
		t.Errorf("perplexity against exp(loss %v): %v", mem.Loss.Mean, err)
	}
	for i, r := range res[:12] {
		if len(r.Probes) != 1 || !(r.Loss > 0) || !(r.MinK <= 0) {
			t.Errorf("doc %d: %+v", i, r)
		}
		if r.Probes[0].Doc != r.Doc {
			t.Errorf("doc %d holds the probe of doc %d", r.Doc, r.Probes[0].Doc)
		}
	}
	// The loss is the mean of the per-token losses of the whole document.
	d := docs[7]
	T := len(d.IDs) - 1
	tl, err := m.TokenLosses(llama.Batch{B: 1, T: T, IDs: d.IDs[:T], Targets: d.IDs[1:]})
	if err != nil {
		t.Fatal(err)
	}
	want := 0.0
	for _, l := range tl {
		want += float64(l)
	}
	want /= float64(T)
	if err := numtest.Scalar(res[7].Loss, want, numtest.Tol{Rel: 1e-5}); err != nil {
		t.Errorf("document loss: %v", err)
	}

	// Strict mode rejects the short document before decoding anything.
	if _, _, err := Evaluate(m, docs, EvalConfig{Protocol: p, Strict: true}); err == nil || !strings.Contains(err.Error(), "1 of 13 documents are too short") {
		t.Errorf("strict: %v", err)
	}
	// The same seed gives the same summary.
	sum2, _, err := Evaluate(m, docs, EvalConfig{Protocol: p, Batch: 3, Bootstrap: Bootstrap{Seed: 7}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(sum, sum2) {
		t.Errorf("summaries differ across batch sizes:\n%+v\n%+v", sum, sum2)
	}
}

// TestEvaluateCarlini groups probes by prefix length.
func TestEvaluateCarlini(t *testing.T) {
	m := tinyModel(t)
	docs := []Document{{ID: 0, Member: true, IDs: make([]int32, 40)}, {ID: 1, IDs: make([]int32, 20)}}
	for i := range docs[0].IDs {
		docs[0].IDs[i] = int32(i % 31)
	}
	for i := range docs[1].IDs {
		docs[1].IDs[i] = int32((7 * i) % 31)
	}
	sum, res, err := Evaluate(m, docs, EvalConfig{Protocol: Carlini([]int{4, 8, 16}, 10)})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(res[0].Probes); got != 3 {
		t.Errorf("member has %d probes, want 3", got)
	}
	if got := len(res[1].Probes); got != 2 { // 16+10 > 20
		t.Errorf("non-member has %d probes, want 2", got)
	}
	if len(sum.Prefixes) != 3 || sum.Prefixes[2].K != 16 || sum.Prefixes[2].NonMembers.Documents != 0 || sum.Prefixes[2].Members.Documents != 1 {
		t.Errorf("prefixes %+v", sum.Prefixes)
	}
	if sum.Prefix(8) == nil || sum.Prefix(9) != nil {
		t.Error("Prefix lookup")
	}
}

// TestSummarize checks the aggregates against hand-computed values.
func TestSummarize(t *testing.T) {
	p := Pythia(4, 4)
	res := []DocResult{
		{Doc: 0, Member: true, Loss: 1, MinK: -1, Probes: []Result{{K: 4, Exact: true, TokenMatch: 1, RougeLIDs: 1, PrefixMatch: 4}}},
		{Doc: 1, Member: true, Loss: 2, MinK: -2, Probes: []Result{{K: 4, TokenMatch: 0.5, RougeLIDs: 0.5, PrefixMatch: 2}}},
		{Doc: 2, Member: false, Loss: 3, MinK: -3, Probes: []Result{{K: 4, TokenMatch: 0.25, PrefixMatch: 1}}},
		{Doc: 3, Member: false, Skipped: "short"},
	}
	s := Summarize(res, p, 20, Bootstrap{Resamples: 200, Seed: 1, Level: 0.9}, false)
	if s.Members != 2 || s.NonMembers != 2 || s.Skipped != 1 {
		t.Fatalf("counts %+v", s)
	}
	g := s.Prefixes[0].Members
	if g.Exact.Mean != 0.5 || g.TokenMatch.Mean != 0.75 || g.PrefixMatch.Mean != 3 || g.Loss.Mean != 1.5 {
		t.Errorf("members %+v", g)
	}
	if g.Exact.Lo != 0 || g.Exact.Hi != 1 {
		t.Errorf("exact interval %v, want [0, 1] for one hit in two", g.Exact)
	}
	if s.MIA.LossAUC != 1 || s.MIA.MinKAUC != 1 || s.MIA.ZlibAUC != 0 {
		t.Errorf("MIA %+v", s.MIA)
	}
	n := s.Prefixes[0].NonMembers
	if n.Documents != 1 || n.TokenMatch.Lo != 0.25 || n.TokenMatch.Hi != 0.25 {
		t.Errorf("non-members %+v", n)
	}
}

// TestEvaluateBadConfig: settings that would quietly become the defaults
// (a negative batch, k of min-k% outside (0, 100] or NaN) are refused.
func TestEvaluateBadConfig(t *testing.T) {
	m := tinyModel(t)
	docs := []Document{{ID: 0, Member: true, IDs: make([]int32, 30)}}
	for _, tc := range []struct {
		name string
		set  func(c *EvalConfig)
		want string
	}{
		{"batch", func(c *EvalConfig) { c.Batch = -1 }, "memorization: batch -1: want 0 (8) or more"},
		{"resamples", func(c *EvalConfig) { c.Bootstrap.Resamples = -5 }, "memorization: resamples -5: want 0 (1,000) or more"},
		{"min-k above 100", func(c *EvalConfig) { c.MinKPercent = 150 }, "memorization: min_k_percent 150: want a percentage in (0, 100]"},
		{"min-k negative", func(c *EvalConfig) { c.MinKPercent = -20 }, "memorization: min_k_percent -20: want a percentage in (0, 100]"},
		{"min-k NaN", func(c *EvalConfig) { c.MinKPercent = math.NaN() }, "memorization: min_k_percent NaN: want a percentage in (0, 100]"},
		{"min-k infinite", func(c *EvalConfig) { c.MinKPercent = math.Inf(1) }, "memorization: min_k_percent +Inf: want a percentage in (0, 100]"},
	} {
		cfg := EvalConfig{Protocol: Custom(10, 8)}
		tc.set(&cfg)
		if _, _, err := Evaluate(m, docs, cfg); err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	for _, k := range []float64{0.5, 20, 100} {
		if err := CheckMinKPercent(k); err != nil {
			t.Errorf("CheckMinKPercent(%v): %v", k, err)
		}
	}
}

// TestReferenceScore: the reference-model score is the loss minus the
// reference's loss, and Summarize's reference attack ranks by it.
func TestReferenceScore(t *testing.T) {
	if got := RefScore(2.5, 4); got != -1.5 {
		t.Errorf("RefScore(2.5, 4) = %v", got)
	}
	f := func(v float64) *float64 { return &v }
	// Losses alone rank the hard member (loss 3) below the easy
	// non-members (losses 2 and 1.5): loss AUC 0.5. Against the reference, the
	// members gain 2 and 1.5 nats, the non-members none: AUC 1.
	res := []DocResult{
		{Doc: 0, Member: true, Loss: 1, RefLoss: f(3), Probes: []Result{{K: 4}}},       // −2
		{Doc: 1, Member: true, Loss: 3, RefLoss: f(4.5), Probes: []Result{{K: 4}}},     // −1.5
		{Doc: 2, Member: false, Loss: 2, RefLoss: f(2), Probes: []Result{{K: 4}}},      // 0
		{Doc: 3, Member: false, Loss: 1.5, RefLoss: f(1.25), Probes: []Result{{K: 4}}}, // 0.25
	}
	s := Summarize(res, Pythia(4, 4), 20, Bootstrap{Resamples: 10, Seed: 1, Level: 0.9}, false)
	m := s.MIA
	if m.LossAUC != 0.5 || !m.Reference || m.RefAUC != 1 || m.RefTPR1 != 1 || m.RefTPR01 != 1 {
		t.Errorf("MIA %+v: want loss AUC 0.5, reference AUC and TPRs 1", m)
	}
	// Loss: the best non-member (1.5) beats the member at 3; the member at
	// 1 alone is flagged at zero false positives.
	if m.LossTPR1 != 0.5 || m.LossTPR01 != 0.5 {
		t.Errorf("loss TPRs %v, %v; want 0.5", m.LossTPR1, m.LossTPR01)
	}
	// A document without a reference loss: no reference attack.
	res[3].RefLoss = nil
	if s := Summarize(res, Pythia(4, 4), 20, Bootstrap{Resamples: 10, Seed: 1, Level: 0.9}, false); s.MIA.Reference || s.MIA.RefAUC != 0 {
		t.Errorf("partial reference: %+v", s.MIA)
	}
}

// TestEvaluateSampling: members the model memorized exactly (its own
// greedy continuations) are extracted with probability 1 at temperature
// → 0, beside greedy's exact match; the summary records the settings and
// the table shows them.
func TestEvaluateSampling(t *testing.T) {
	m := tinyModel(t)
	rng := rand.New(rand.NewPCG(3, 4))
	var docs []Document
	for i := range 4 {
		prompt := make([]int32, 10)
		for j := range prompt {
			prompt[j] = int32(rng.IntN(31))
		}
		gen, err := m.Generate([][]int32{prompt}, llama.GenerateOptions{MaxNewTokens: 6})
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, Document{ID: i, Member: true, IDs: append(prompt, gen[0]...)})
	}
	sc := SampleConfig{Samples: 3, Temperature: 1e-6, Seed: 9}
	sum, res, err := Evaluate(m, docs, EvalConfig{Protocol: Custom(10, 6), Batch: 5, Sampling: sc, Bootstrap: Bootstrap{Resamples: 10}})
	if err != nil {
		t.Fatal(err)
	}
	g := sum.Prefixes[0].Members
	if g.Exact.Mean != 1 || g.Sampled == nil || g.Sampled.Extracted.Mean != 1 || g.Sampled.Probability.Mean != 1 {
		t.Errorf("members %+v sampled %+v: want greedy and sampled extraction 1", g, g.Sampled)
	}
	if sum.Sampling == nil || *sum.Sampling != sc || res[0].Probes[0].Samples != 3 || res[0].Probes[0].SampleHits != 3 {
		t.Errorf("sampling %+v, first probe %+v", sum.Sampling, res[0].Probes[0])
	}
	var b bytes.Buffer
	if err := WriteTable(&b, sum); err != nil {
		t.Fatal(err)
	}
	out := strings.Join(strings.Fields(b.String()), " ")
	for _, want := range []string{"probabilistic extraction: 3 samples a document at temperature 1e-06, top-k 0 (the whole vocabulary), seed 9",
		"10 members 4 100.0 [100.0, 100.0] 100.0 [100.0, 100.0] 100.0 [100.0, 100.0]"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	if _, _, err := Evaluate(m, docs, EvalConfig{Protocol: Custom(10, 6), Sampling: SampleConfig{Samples: 1, Temperature: -1}}); err == nil || !strings.Contains(err.Error(), "temperature -1") {
		t.Errorf("temperature -1: %v", err)
	}
}

// randomIDs returns a source of random token ids below 31 (the tiny
// model's vocabulary), n at a time.
func randomIDs(rng *rand.Rand) func(n int) []int32 {
	return func(n int) []int32 {
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32(rng.IntN(31))
		}
		return ids
	}
}
