package memorization

import (
	"testing"

	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/internal/numtest"
)

// TestExtract: a suffix that is the model's own greedy continuation is
// extracted exactly; a different one is not.
func TestExtract(t *testing.T) {
	m := tinyModel(t)
	prompts := [][]int32{{1, 2, 3, 4}, {5, 6, 7}, {8, 9, 10, 11, 12}}
	gen, err := m.Generate(prompts, llama.GenerateOptions{MaxNewTokens: 6})
	if err != nil {
		t.Fatal(err)
	}
	var probes []Probe
	for i, p := range prompts {
		probes = append(probes, Probe{Doc: i, K: len(p), Prefix: p, Suffix: gen[i]})
	}
	wrong := make([]int32, 6)
	for i := range wrong {
		wrong[i] = (gen[0][i] + 1) % 31
	}
	probes = append(probes, Probe{Doc: 3, K: 4, Prefix: prompts[0], Suffix: wrong})
	res, err := Extract(m, probes, ExtractOptions{Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res[:3] {
		if !r.Exact || r.TokenMatch != 1 || r.PrefixMatch != 6 || r.RougeLIDs != 1 {
			t.Errorf("probe %d: %+v, want an exact extraction", i, r)
		}
	}
	if r := res[3]; r.Exact || r.TokenMatch != 0 || r.PrefixMatch != 0 {
		t.Errorf("wrong suffix scored %+v", r)
	}
}

// TestExtractSampling: probabilistic extraction. A suffix the model
// memorized exactly (its own greedy continuation) is extracted with
// probability 1 at temperature → 0 and at top-k 1; the samples are the
// same for a seed whatever the batch, and change with the seed.
func TestExtractSampling(t *testing.T) {
	m := tinyModel(t)
	prompts := [][]int32{{1, 2, 3, 4}, {5, 6, 7}, {8, 9, 10, 11, 12}}
	gen, err := m.Generate(prompts, llama.GenerateOptions{MaxNewTokens: 6})
	if err != nil {
		t.Fatal(err)
	}
	var probes []Probe
	for i, p := range prompts {
		probes = append(probes, Probe{Doc: i, K: len(p), Prefix: p, Suffix: gen[i]})
	}
	run := func(batch int, sc SampleConfig) []Result {
		t.Helper()
		res, err := Extract(m, probes, ExtractOptions{Batch: batch, Sampling: sc})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for _, sc := range []SampleConfig{{Samples: 5, Temperature: 1e-6, Seed: 1}, {Samples: 5, Temperature: 2, TopK: 1, Seed: 1}} {
		for i, r := range run(4, sc) {
			if r.Samples != 5 || r.SampleHits != 5 || r.ExtractionProb() != 1 {
				t.Errorf("%+v: probe %d: %d of %d samples extract, want all", sc, i, r.SampleHits, r.Samples)
			}
		}
	}
	// A random model at temperature 3 over its 31 tokens: six tokens in a
	// row are rarely its greedy ones.
	hot := SampleConfig{Samples: 6, Temperature: 3, Seed: 7}
	a, b := run(1, hot), run(5, hot)
	for i := range a {
		if a[i].SampleHits != b[i].SampleHits {
			t.Errorf("probe %d: %d hits at batch 1, %d at batch 5", i, a[i].SampleHits, b[i].SampleHits)
		}
		if a[i].SampleHits == a[i].Samples {
			t.Errorf("probe %d: every hot sample extracts", i)
		}
	}
	// The samples themselves: a probe's continuations for a seed.
	p := probes[0]
	seeds := []uint64{sampleSeed(7, p, 0), sampleSeed(7, p, 1), sampleSeed(8, p, 0)}
	if seeds[0] == seeds[1] || seeds[0] == seeds[2] {
		t.Errorf("seeds %v collide", seeds)
	}
	for _, bad := range []SampleConfig{{Samples: -1}, {Samples: 2, Temperature: 0}, {Samples: 2, Temperature: 1, TopK: -3}} {
		if _, err := Extract(m, probes, ExtractOptions{Sampling: bad}); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// TestSummarizeSampling: the fraction of documents extracted by a sample
// and the mean extraction probability, by hand.
func TestSummarizeSampling(t *testing.T) {
	res := []DocResult{
		{Doc: 0, Member: true, Probes: []Result{{K: 4, Samples: 4, SampleHits: 4}}},
		{Doc: 1, Member: true, Probes: []Result{{K: 4, Samples: 4, SampleHits: 1}}},
		{Doc: 2, Member: true, Probes: []Result{{K: 4, Samples: 4}}},
		{Doc: 3, Member: false, Probes: []Result{{K: 4, Samples: 4}}},
	}
	s := Summarize(res, Pythia(4, 4), 20, Bootstrap{Resamples: 10, Seed: 1, Level: 0.9}, false)
	g := s.Prefixes[0].Members.Sampled
	if g == nil {
		t.Error("no members sampled")
	} else if err := numtest.Close([]float64{g.Extracted.Mean, g.Probability.Mean}, []float64{2.0 / 3, 1.25 / 3}, numtest.Tol{Abs: 1e-12}); err != nil {
		t.Errorf("members sampled %+v (extracted, probability): %v", g, err)
	}
	if n := s.Prefixes[0].NonMembers.Sampled; n == nil || n.Extracted.Mean != 0 {
		t.Errorf("non-members sampled %+v", n)
	}
	for i := range res {
		res[i].Probes[0].Samples, res[i].Probes[0].SampleHits = 0, 0
	}
	if s := Summarize(res, Pythia(4, 4), 20, Bootstrap{Resamples: 10}, false); s.Prefixes[0].Members.Sampled != nil {
		t.Error("greedy only, yet a sampled group")
	}
}
