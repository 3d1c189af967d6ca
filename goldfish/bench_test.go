package goldfish

import (
	"math/rand/v2"
	"testing"
)

// benchTargets is a 4096-token sequence of Llama 3-sized ids.
func benchTargets() []int32 {
	r := rand.New(rand.NewPCG(1, 2))
	t := make([]int32, 4096)
	for i := range t {
		t[i] = r.Int32N(128256)
	}
	return t
}

// BenchmarkMask reports tokens/s per strategy on one core.
func BenchmarkMask(b *testing.B) {
	ids := benchTargets()
	for _, c := range []Config{
		{Strategy: Static, K: 4},
		{Strategy: HashTable, K: 4, H: 4},
		{Strategy: HashTable, K: 4, H: 13},
		{Strategy: HashTable, K: 4, H: 50},
		{Strategy: HashAvalanche, K: 4, H: 4},
		{Strategy: HashAvalanche, K: 4, H: 13},
	} {
		b.Run(c.String(), func(b *testing.B) {
			m := mustNew(b, c)
			w := make([]float32, len(ids))
			b.SetBytes(int64(len(ids))) // "MB/s" reads as millions of tokens/s
			for b.Loop() {
				m.Mask(ids, w)
			}
			b.ReportMetric(float64(b.N)*float64(len(ids))/b.Elapsed().Seconds()/1e6, "Mtokens/s")
		})
	}
}

// BenchmarkApply is Mask over padding weights.
func BenchmarkApply(b *testing.B) {
	ids := benchTargets()
	m := mustNew(b, Config{Strategy: HashTable, K: 4, H: 13})
	w := make([]float32, len(ids))
	b.SetBytes(int64(len(ids)))
	for b.Loop() {
		for i := range w {
			w[i] = float32(i & 1)
		}
		m.Apply(ids, w)
	}
}

// BenchmarkNew measures drawing the hash table's 1,000,003 values.
func BenchmarkNew(b *testing.B) {
	for b.Loop() {
		mustNew(b, Config{Strategy: HashTable, K: 4, H: 13})
	}
}
