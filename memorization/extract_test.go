package memorization

import (
	"testing"

	"github.com/memtrain/memtrain/engine/llama"
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
