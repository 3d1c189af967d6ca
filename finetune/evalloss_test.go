package finetune

import (
	"errors"
	"math"
	"testing"

	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/internal/numtest"
)

// TestLossReport: documents without a scored token are skipped, the mean
// is over every scored token (not over documents), and a loss that is not
// finite is ErrNotFinite.
func TestLossReport(t *testing.T) {
	d := LossData{Data: "docs.jsonl", SeqLen: 16}
	sc := &llama.Scores{Sum: []float64{6, 0, 2}, Weight: []float64{3, 0, 1}}
	rep, err := d.Report("m", sc, []int{1, 2, 5})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Documents != 2 || rep.Skipped != 1 || rep.Tokens != 4 || len(rep.PerDoc) != 2 || rep.PerDoc[1] != (DocLoss{Index: 2, Line: 5, Tokens: 1, Loss: 2}) {
		t.Errorf("report %+v", rep)
	}
	// (6 + 2) / 4 tokens, exactly: the sums are small integers.
	if err := numtest.Equal([]float64{rep.Loss, rep.Perplexity}, []float64{2, math.Exp(2)}); err != nil {
		t.Errorf("loss, perplexity: %v", err)
	}
	sc.Sum[0] = math.Inf(1)
	if _, err := d.Report("m", sc, []int{1, 2, 5}); !errors.Is(err, ErrNotFinite) {
		t.Errorf("an infinite sum: %v, want ErrNotFinite", err)
	}
}
