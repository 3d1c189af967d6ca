package llama

import (
	"reflect"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/internal/numtest"
)

func TestWindows(t *testing.T) {
	w := NewWindows([][]int32{{1, 2, 3, 4, 5, 6}, {7}, {8, 9}, {}}, 2)
	type win struct{ doc, n int }
	var got []win
	var ids, targets [][]int32
	for i := range w.Len() {
		n := w.Positions(i)
		got = append(got, win{w.Doc(i), n})
		in, tg, wt := make([]int32, n), make([]int32, n), make([]float32, n)
		if err := w.Read(i, in, tg, wt); err != nil {
			t.Fatal(err)
		}
		for _, x := range wt {
			if x != 1 {
				t.Errorf("window %d: weights %v", i, wt)
			}
		}
		ids, targets = append(ids, in), append(targets, tg)
	}
	// Five targets of document 0 in windows of 2, 2 and 1; the one-token
	// and empty documents have none.
	if want := []win{{0, 2}, {0, 2}, {0, 1}, {2, 1}}; !reflect.DeepEqual(got, want) {
		t.Errorf("windows %v, want %v", got, want)
	}
	if want := [][]int32{{1, 2}, {3, 4}, {5}, {8}}; !reflect.DeepEqual(ids, want) {
		t.Errorf("inputs %v, want %v", ids, want)
	}
	if want := [][]int32{{2, 3}, {4, 5}, {6}, {9}}; !reflect.DeepEqual(targets, want) {
		t.Errorf("targets %v, want %v", targets, want)
	}
}

// scoreDocs are documents of uneven lengths, some longer than a window.
func scoreDocs(vocab int) [][]int32 {
	var docs [][]int32
	for d, n := range []int{9, 1, 4, 12, 2, 7, 5} {
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32((d*31 + i*7 + 3) % vocab)
		}
		docs = append(docs, ids)
	}
	return docs
}

// TestScore: per-document sums equal TokenLosses over each window on its
// own, whatever the batch, and on grids equal one rank's.
func TestScore(t *testing.T) {
	cfg := gridConfig(false)
	ref := randomModel(t, newBackend(1), cfg, Options{}, 5)
	defer ref.Free()
	docs := scoreDocs(cfg.VocabSize)
	src := NewWindows(docs, 5)

	// The reference: each window alone, position losses appended.
	want := &Scores{Sum: make([]float64, len(docs)), Weight: make([]float64, len(docs)), Tokens: make([][]float32, len(docs))}
	for i := range src.Len() {
		n := src.Positions(i)
		b := Batch{B: 1, T: n, IDs: make([]int32, n), Targets: make([]int32, n), Weights: make([]float32, n)}
		if err := src.Read(i, b.IDs, b.Targets, b.Weights); err != nil {
			t.Fatal(err)
		}
		tok, err := ref.TokenLosses(b)
		if err != nil {
			t.Fatal(err)
		}
		d := src.Doc(i)
		for _, l := range tok {
			want.Sum[d] += float64(l)
			want.Weight[d]++
		}
		want.Tokens[d] = append(want.Tokens[d], tok...)
	}
	check := func(name string, got *Scores, tol float64) {
		t.Helper()
		for d := range docs {
			if err := numtest.Scalar(got.Sum[d], want.Sum[d], numtest.Tol{Rel: tol}); err != nil || got.Weight[d] != want.Weight[d] {
				t.Errorf("%s: document %d: sum over %v, want over %v: %v", name, d, got.Weight[d], want.Weight[d], err)
			}
			if len(want.Tokens[d]) == 0 { // a one-token document has no targets
				if len(got.Tokens[d]) != 0 {
					t.Errorf("%s: document %d: %d position losses, want none", name, d, len(got.Tokens[d]))
				}
			} else if err := numtest.CloseL2(got.Tokens[d], want.Tokens[d], tol); err != nil {
				t.Errorf("%s: document %d: position losses: %v", name, d, err)
			}
		}
		if err := numtest.Scalar(got.Mean(), want.Mean(), numtest.Tol{Rel: tol}); err != nil {
			t.Errorf("%s: mean: %v", name, err)
		}
	}
	for _, batch := range []int{1, 3, 8} {
		got, err := ref.Score(src, ScoreOptions{Docs: len(docs), Batch: batch, PerToken: true})
		if err != nil {
			t.Fatal(err)
		}
		check("one rank", got, 1e-6)
	}
	if _, err := ref.Score(src, ScoreOptions{Docs: 3}); err == nil {
		t.Error("a sequence of document 3 of 3 was accepted")
	}

	w := ref.Weights()
	for _, shape := range []comm.Grid{{Data: 2, X: 1, Y: 1, Z: 2}, {Data: 1, X: 2, Y: 2, Z: 1}, {Data: 3, X: 1, Y: 1, Z: 1}} {
		var mu sync.Mutex
		err := onGrid(shape, cfg, w, func(g *parallel.Grid, m *Model) error {
			got, err := m.Score(src, ScoreOptions{Docs: len(docs), Batch: 2, PerToken: true})
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			check(shape.String(), got, 1e-5)
			return nil
		})
		if err != nil {
			t.Fatalf("%v: %v", shape, err)
		}
	}
}
