package memorization

import "testing"

func TestEvalProgress(t *testing.T) {
	for _, c := range []struct {
		scored, docs, decoded, probes int
		done, total                   int
	}{
		{0, 10, 0, 40, 0, 20},
		{10, 10, 0, 40, 10, 20},  // scored: half way
		{10, 10, 20, 40, 15, 20}, // half the probes decoded
		{10, 10, 40, 40, 20, 20},
		{0, 0, 0, 0, 0, 0}, // no probes: no division by zero
	} {
		done, total := EvalProgress(c.scored, c.docs, c.decoded, c.probes)
		if done != c.done || total != c.total {
			t.Errorf("EvalProgress(%d, %d, %d, %d) = %d of %d, want %d of %d", c.scored, c.docs, c.decoded, c.probes, done, total, c.done, c.total)
		}
	}
}
