package memorization

import (
	"math/rand/v2"
	"testing"

	"github.com/memtrain/memtrain/engine/llama"
)

// TestExtractionEqualsEvaluate: greedy extraction alone gives Evaluate's
// exact and token means for every prefix length, members and
// non-members, whatever the batch; the model's own continuations are
// extracted verbatim; documents without probes are refused.
func TestExtractionEqualsEvaluate(t *testing.T) {
	m := tinyModel(t)
	random := randomIDs(rand.New(rand.NewPCG(3, 4)))
	var docs []Document
	for i := range 5 {
		prompt := random(10) // custom's prefix: the suffix is the model's continuation
		gen, err := m.Generate([][]int32{prompt}, llama.GenerateOptions{MaxNewTokens: 8 + i})
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, Document{ID: i, Member: true, IDs: append(prompt, gen[0]...)})
	}
	for i := range 5 {
		docs = append(docs, Document{ID: 5 + i, IDs: random(18 + i)})
	}
	docs = append(docs, Document{ID: 10, IDs: random(5)}) // too short
	for _, p := range []Protocol{Custom(10, 8), Carlini([]int{4, 8}, 8)} {
		s, _, err := Evaluate(m, docs, EvalConfig{Protocol: p, Bootstrap: Bootstrap{Resamples: 10}})
		if err != nil {
			t.Fatal(err)
		}
		for _, batch := range []int{0, 3} {
			e, err := Extraction(m, docs, ExtractionConfig{Protocol: p, Batch: batch})
			if err != nil {
				t.Fatal(err)
			}
			prefixes := e.Prefixes
			if len(s.Prefixes) == 1 {
				if prefixes != nil {
					t.Errorf("%s: one prefix length listed in prefixes %+v", p, prefixes)
				}
				prefixes = []PrefixExtraction{{K: s.Prefixes[0].K, Members: e.Members, NonMembers: e.NonMembers}}
			}
			if len(prefixes) != len(s.Prefixes) || e.Protocol != p.Key() {
				t.Fatalf("%s: %+v, summary's prefixes %+v", p, e, s.Prefixes)
			}
			for i, ps := range s.Prefixes {
				got := prefixes[i]
				want := PrefixExtraction{K: ps.K, Members: ExtractionGroup{ps.Members.Documents, ps.Members.Exact.Mean, ps.Members.TokenMatch.Mean},
					NonMembers: &ExtractionGroup{ps.NonMembers.Documents, ps.NonMembers.Exact.Mean, ps.NonMembers.TokenMatch.Mean}}
				if got.K != want.K || got.Members != want.Members || got.NonMembers == nil || *got.NonMembers != *want.NonMembers {
					t.Errorf("%s batch %d prefix %d: %+v %+v, Evaluate's %+v %+v", p, batch, ps.K, got.Members, got.NonMembers, want.Members, want.NonMembers)
				}
			}
			if last := prefixes[len(prefixes)-1]; e.Members != last.Members {
				t.Errorf("%s: members %+v, not the longest prefix's %+v", p, e.Members, last.Members)
			}
		}
	}
	e, err := Extraction(m, docs, ExtractionConfig{Protocol: Custom(10, 8)})
	if err != nil {
		t.Fatal(err)
	}
	if e.Members.Exact != 1 || e.Members.Documents != 5 || e.NonMembers.Documents != 5 {
		t.Errorf("the model's own continuations: %+v", e)
	}
	if _, err := Extraction(m, docs[10:], ExtractionConfig{Protocol: Custom(10, 8)}); err == nil {
		t.Error("documents without probes: no error")
	}
	if _, _, err := CheckExtraction(docs[10:], Custom(10, 8), 96); err == nil {
		t.Error("CheckExtraction: documents without probes: no error")
	}
	if n, skipped, err := CheckExtraction(docs, Custom(10, 8), 96); err != nil || n != 10 || skipped != 1 {
		t.Errorf("CheckExtraction: %d probes, %d skipped, %v", n, skipped, err)
	}
}
