package llama

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/parallel"
)

// TestSampleToken: the inverse of the cumulative distribution, in id
// order, over the softmax of logits/T and the top k.
func TestSampleToken(t *testing.T) {
	ln := func(p float64) float32 { return float32(math.Log(p)) }
	// Probabilities 0.5, 0.25, 0.125, 0.125 at T = 1.
	logits := []float32{ln(0.5), ln(0.25), ln(0.125), ln(0.125)}
	for _, c := range []struct {
		u     float64
		t     float64
		k     int
		want  int32
		label string
	}{
		{0, 1, 0, 0, "u 0"},
		{0.49, 1, 0, 0, "first half"},
		{0.51, 1, 0, 1, "second quarter"},
		{0.76, 1, 0, 2, "third"},
		{0.99, 1, 0, 3, "last"},
		// Top 2: 2/3 and 1/3.
		{0.6, 1, 2, 0, "top-2 first"},
		{0.7, 1, 2, 1, "top-2 second"},
		// Top 3: ids 2 and 3 tie at the third place; the lower id stays.
		{0.99, 1, 3, 2, "top-3 tie to the lower id"},
		// T = 0.5 squares the probabilities: 0.25, 1/16, 1/64, 1/64 over
		// 11/32: id 0 up to 8/11 = 0.727.
		{0.72, 0.5, 0, 0, "T 0.5 first"},
		{0.74, 0.5, 0, 1, "T 0.5 second"},
		{0.999999, 1e-6, 0, 0, "T → 0 is greedy"},
		{0.999999, 1, 1, 0, "top-1 is greedy"},
	} {
		if got := sampleToken(logits, c.t, c.k, c.u, nil, nil); got != c.want {
			t.Errorf("%s: u %v T %v k %d: %d, want %d", c.label, c.u, c.t, c.k, got, c.want)
		}
	}
	// Greedy's tie rule: top-1 of a tie is the lowest id.
	if got := sampleToken([]float32{1, 3, 3, 2}, 1, 1, 0.99, nil, nil); got != 1 {
		t.Errorf("top-1 of a tie: %d, want 1", got)
	}
	if got := sampleToken([]float32{float32(math.NaN()), 0}, 1, 0, 0, nil, nil); got != 1 {
		t.Errorf("NaN drawn: %d", got)
	}
	for _, s := range []Sampling{{Temperature: 0}, {Temperature: -1}, {Temperature: math.NaN()}, {Temperature: math.Inf(1)}, {Temperature: 1, TopK: -1}} {
		if err := s.Check(); err == nil {
			t.Errorf("%+v accepted", s)
		}
	}
}

// TestGenerateSampling: sampled continuations are deterministic for a
// seed whatever the batch; top-k 1 and a temperature near 0 are greedy
// decoding.
func TestGenerateSampling(t *testing.T) {
	cfg := testConfig(false, 2)
	m := randomModel(t, newBackend(2), cfg, Options{}, 21)
	defer m.Free()
	prompts := [][]int32{{1, 2, 3}, {4, 5, 6, 7, 8, 9, 10}, {11}, {1, 2, 3}}
	gen := func(ps [][]int32, s *Sampling) [][]int32 {
		t.Helper()
		out, err := m.Generate(ps, GenerateOptions{MaxNewTokens: 8, Sampling: s})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	seeds := []uint64{1, 2, 3, 4}
	hot := &Sampling{Temperature: 2, TopK: 0, Seeds: seeds}
	a, b := gen(prompts, hot), gen(prompts, hot)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("one seed, two results:\n%v\n%v", a, b)
	}
	// Prompts 0 and 3 are equal, their seeds not: hot sampling of a
	// random model differs.
	if slices.Equal(a[0], a[3]) {
		t.Errorf("seeds 1 and 4 sampled the same: %v", a[0])
	}
	// Alone or in another batch, a prompt's continuation is the same.
	for i := range prompts {
		one := gen(prompts[i:i+1], &Sampling{Temperature: 2, Seeds: seeds[i : i+1]})
		if !slices.Equal(one[0], a[i]) {
			t.Errorf("prompt %d alone: %v, in the batch %v", i, one[0], a[i])
		}
	}
	rev := gen([][]int32{prompts[2], prompts[1]}, &Sampling{Temperature: 2, Seeds: []uint64{3, 2}})
	if !slices.Equal(rev[0], a[2]) || !slices.Equal(rev[1], a[1]) {
		t.Errorf("reordered batch: %v, want %v %v", rev, a[2], a[1])
	}
	greedy := gen(prompts, nil)
	for _, s := range []*Sampling{{Temperature: 1, TopK: 1, Seeds: seeds}, {Temperature: 1e-6, Seeds: seeds}, {Temperature: 3, TopK: 1, Seeds: seeds}} {
		if got := gen(prompts, s); fmt.Sprint(got) != fmt.Sprint(greedy) {
			t.Errorf("T %v top-k %d: %v, greedy %v", s.Temperature, s.TopK, got, greedy)
		}
	}
	if _, err := m.Generate(prompts, GenerateOptions{MaxNewTokens: 2, Sampling: &Sampling{Temperature: 1, Seeds: seeds[:2]}}); err == nil {
		t.Error("2 seeds for 4 prompts accepted")
	}
}

// TestGridSampling: sampled generations on grids (the vocabulary split over
// Y ranks included) equal one rank's.
func TestGridSampling(t *testing.T) {
	cfg := gridConfig(false)
	ref := randomModel(t, newBackend(1), cfg, Options{}, 11)
	defer ref.Free()
	w := ref.Weights()
	prompts := [][]int32{{1, 2, 3}, {4, 5, 6, 7, 8}, {9}, {10, 11, 12}}
	opt := GenerateOptions{MaxNewTokens: 6, Sampling: &Sampling{Temperature: 1.5, TopK: 20, Seeds: []uint64{5, 6, 7, 8}}}
	want, err := ref.Generate(prompts, opt)
	if err != nil {
		t.Fatal(err)
	}
	for _, shape := range []comm.Grid{{Data: 1, X: 1, Y: 4, Z: 2}, {Data: 2, X: 2, Y: 2, Z: 1}} {
		var mu sync.Mutex
		err := onGrid(shape, cfg, w, func(g *parallel.Grid, m *Model) error {
			gen, err := m.Generate(prompts, opt)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			if fmt.Sprint(gen) != fmt.Sprint(want) {
				t.Errorf("%v rank %d: sampled %v, want %v", shape, g.Rank(), gen, want)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%v: %v", shape, err)
		}
	}
}
