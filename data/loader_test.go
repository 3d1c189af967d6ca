package data

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// countingStore has n one-sequence documents: document i is [i+3, 99], so
// sequence i has input i+3 (document mode, T = 2; padding is EOS, 2).
func countingStore(t *testing.T, n int) *Store {
	t.Helper()
	docs := make([][]int32, n)
	for i := range docs {
		docs[i] = []int32{int32(i%90 + 3), 99}
	}
	return buildStore(t, Settings{Mode: ModeDocument, SeqLen: 2}, docs...)
}

func batches(t *testing.T, l *Loader, n int) []Batch {
	t.Helper()
	out := make([]Batch, n)
	for i := range out {
		b, err := l.Next()
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	return out
}

func TestLoaderBatch(t *testing.T) {
	s := countingStore(t, 5)
	l, err := NewLoader(s, LoaderConfig{BatchSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := l.Next()
	want := Batch{
		IDs: []int32{3, 99, 4, 99}, Targets: []int32{99, 2, 99, 2}, Weights: []float32{1, 0, 1, 0},
		B: 2, T: 2, DocIDs: []int{0, 1}, Epoch: 0, Position: 0,
	}
	if !reflect.DeepEqual(b, want) {
		t.Errorf("batch %+v, want %+v", b, want)
	}
	// Five sequences, batches of two: the third batch wraps into epoch 1.
	bs := batches(t, l, 3)
	var docs [][]int
	for _, b := range bs {
		docs = append(docs, b.DocIDs)
	}
	if want := [][]int{{2, 3}, {4, 0}, {1, 2}}; !reflect.DeepEqual(docs, want) {
		t.Errorf("documents %v, want %v", docs, want)
	}
	if bs[1].Epoch != 0 || bs[2].Epoch != 1 || bs[2].Position != 6 || l.Position() != 8 {
		t.Errorf("epochs %d %d, position %d, loader at %d", bs[1].Epoch, bs[2].Epoch, bs[2].Position, l.Position())
	}
}

func TestLoaderDeterministicEpochs(t *testing.T) {
	const n = 23
	s := countingStore(t, n)
	cfg := LoaderConfig{BatchSize: 4, Shuffle: true, Seed: 42}
	a, _ := NewLoader(s, cfg)
	b, _ := NewLoader(s, cfg)
	ba, bb := batches(t, a, 30), batches(t, b, 30)
	if !reflect.DeepEqual(ba, bb) {
		t.Fatal("two loaders with one configuration differ")
	}
	// The stream is epoch after epoch of permutations.
	var stream []int
	for _, b := range ba {
		stream = append(stream, b.DocIDs...)
	}
	for e := 0; (e+1)*n <= len(stream); e++ {
		epoch := slices.Clone(stream[e*n : (e+1)*n])
		slices.Sort(epoch)
		for i, d := range epoch {
			if d != i {
				t.Fatalf("epoch %d is not a permutation: %v", e, stream[e*n:(e+1)*n])
			}
		}
	}
	if slices.Equal(stream[:n], stream[n:2*n]) {
		t.Error("epochs 0 and 1 in the same order")
	}
	if slices.IsSorted(stream[:n]) {
		t.Error("epoch 0 not shuffled")
	}
	cfg.Seed = 43
	c, _ := NewLoader(s, cfg)
	if reflect.DeepEqual(batches(t, c, 5), ba[:5]) {
		t.Error("another seed gives the same batches")
	}
}

func TestLoaderSetPosition(t *testing.T) {
	s := countingStore(t, 11)
	for _, cfg := range []LoaderConfig{
		{BatchSize: 4, Shuffle: true, Seed: 1},
		{BatchSize: 6, Shuffle: true, Seed: 2, Ranks: 3, Rank: 2},
		{BatchSize: 25, Shuffle: true, Seed: 3}, // more than an epoch
		{BatchSize: 3},
	} {
		l, err := NewLoader(s, cfg)
		if err != nil {
			t.Fatal(err)
		}
		run := batches(t, l, 20)
		for _, k := range []int{0, 1, 2, 5, 9, 13, 19} {
			r, _ := NewLoader(s, cfg)
			// Read something else first: the position alone decides.
			batches(t, r, k%3)
			if err := r.SetPosition(run[k].Position); err != nil {
				t.Fatal(err)
			}
			got := batches(t, r, 20-k)
			if !reflect.DeepEqual(got, run[k:]) {
				t.Errorf("%+v: resumed at batch %d (position %d) differs", cfg, k, run[k].Position)
			}
		}
		if err := l.SetPosition(-1); err == nil {
			t.Error("negative position accepted")
		}
	}
}

func TestLoaderRanksPartition(t *testing.T) {
	s := countingStore(t, 13)
	global, _ := NewLoader(s, LoaderConfig{BatchSize: 8, Shuffle: true, Seed: 5})
	var ranks []*Loader
	for r := range 4 {
		l, err := NewLoader(s, LoaderConfig{BatchSize: 8, Shuffle: true, Seed: 5, Ranks: 4, Rank: r})
		if err != nil {
			t.Fatal(err)
		}
		ranks = append(ranks, l)
	}
	for step := range 10 {
		g, _ := global.Next()
		var ids []int32
		var docs []int
		for _, l := range ranks {
			b, _ := l.Next()
			if b.B != 2 || b.Position != g.Position || b.Epoch != g.Epoch {
				t.Fatalf("rank batch %+v vs global %+v", b, g)
			}
			ids = append(ids, b.IDs...)
			docs = append(docs, b.DocIDs...)
		}
		if !slices.Equal(ids, g.IDs) || !slices.Equal(docs, g.DocIDs) {
			t.Errorf("step %d: ranks %v, global %v", step, docs, g.DocIDs)
		}
	}
}

func TestLoaderHoldoutSplit(t *testing.T) {
	texts := austen(t, 100)
	dir := t.TempDir() + "/ds"
	w, _ := CreateStore(dir, handTok, Settings{Mode: ModeDocument, SeqLen: 2, Holdout: 0.3})
	for i, text := range texts {
		w.Add(Document{Source: "a", Line: int64(i + 1), Text: text, IDs: []int32{5, 6}})
	}
	w.Commit(nil, nil)
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, split := range []Split{Train, Holdout} {
		n := s.NumSequences(split)
		l, err := NewLoader(s, LoaderConfig{Split: split, BatchSize: n})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := l.Next()
		for _, d := range b.DocIDs {
			if info, _ := s.Doc(d); info.Split != split {
				t.Errorf("%s loader gave document %d of %s", split, d, info.Split)
			}
		}
	}
}

func TestLoaderErrors(t *testing.T) {
	s := countingStore(t, 4)
	tests := []struct {
		cfg  LoaderConfig
		want string
	}{
		{LoaderConfig{}, "batch size 0"},
		{LoaderConfig{BatchSize: 6, Ranks: 4}, "batch size 6 is not a positive multiple of the 4 ranks"},
		{LoaderConfig{BatchSize: 4, Ranks: 2, Rank: 2}, "rank 2 of 2"},
		{LoaderConfig{BatchSize: 4, Split: "test"}, `unknown split "test"`},
		{LoaderConfig{BatchSize: 4, Split: Holdout}, "the holdout split has no sequences"},
	}
	for _, tt := range tests {
		_, err := NewLoader(s, tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: error %v, want %q", tt.cfg, err, tt.want)
		}
	}
}

// TestPermutationStable pins the shuffle, which must not change between
// Go versions or platforms: resumed runs depend on it.
func TestPermutationStable(t *testing.T) {
	got := permutation(nil, 10, 1, 0)
	want := []int32{7, 6, 1, 3, 2, 4, 8, 9, 0, 5}
	if !slices.Equal(got, want) {
		t.Errorf("permutation(10, seed 1, epoch 0) = %v, want %v", got, want)
	}
	// Bounded draws are uniform enough: each of 3 values about a third.
	src := rand.NewPCG(9, 9)
	var counts [3]int
	for range 30000 {
		counts[boundedDraw(src, 3)]++
	}
	for _, c := range counts {
		if c < 9500 || c > 10500 {
			t.Errorf("bounded draw counts %v", counts)
		}
	}
}
