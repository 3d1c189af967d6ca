package llama

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/internal/numtest"
)

func newBackend(threads int) engine.Backend { return cpu.New(cpu.Options{Threads: threads}) }

func testConfig(tie bool, kvHeads int) *checkpoints.Config {
	c := &checkpoints.Config{
		HiddenSize: 16, IntermediateSize: 24, NumHiddenLayers: 2, NumAttentionHeads: 4, NumKeyValueHeads: kvHeads,
		RMSNormEps: 1e-5, RopeTheta: 10000, MaxPositionEmbeddings: 32, VocabSize: 23, TieWordEmbeddings: tie,
		TorchDType: "float32", HiddenAct: "silu", InitializerRange: 0.3,
		RopeScaling: &checkpoints.RopeScaling{RopeType: "llama3", Factor: 4, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8},
	}
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return c
}

func randomModel(t *testing.T, b engine.Backend, cfg *checkpoints.Config, opt Options, seed uint64) *Model {
	t.Helper()
	m, err := New(b, cfg, opt)
	if err != nil {
		t.Fatal(err)
	}
	w := checkpoints.RandomWeights(cfg, seed)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range w {
		if len(w[i].Shape) == 1 { // norms: away from one so their gradients matter
			for j := range w[i].Data {
				w[i].Data[j] = 1 + 0.2*float32(r.NormFloat64())
			}
		}
	}
	if err := m.SetWeights(w); err != nil {
		t.Fatal(err)
	}
	return m
}

func randomBatch(cfg *checkpoints.Config, B, T int, seed uint64) Batch {
	r := rand.New(rand.NewPCG(seed, 2))
	n := B * T
	batch := Batch{B: B, T: T, IDs: make([]int32, n), Targets: make([]int32, n), Weights: make([]float32, n)}
	for i := 0; i < n; i++ {
		batch.IDs[i] = int32(r.IntN(cfg.VocabSize))
		batch.Targets[i] = int32(r.IntN(cfg.VocabSize))
		if r.Float64() < 0.75 {
			batch.Weights[i] = 1
		} else {
			batch.Targets[i] = -1 // ignored targets may be invalid
		}
	}
	return batch
}

func download(m *Model, t *engine.Tensor) []float32 {
	out := make([]float32, t.Len())
	m.Backend().Download(out, t)
	return out
}

// TestFiniteDifferences checks the whole model's gradient against central
// differences of its loss, for a sample of elements of every parameter.
func TestFiniteDifferences(t *testing.T) {
	for _, tc := range []struct {
		name string
		tie  bool
		kv   int
	}{{"gqa-untied", false, 2}, {"mha-tied", true, 4}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(tc.tie, tc.kv)
			m := randomModel(t, newBackend(1), cfg, Options{}, 5)
			defer m.Free()
			batch := randomBatch(cfg, 2, 7, 9)
			m.ZeroGrads()
			l0, err := m.ForwardBackward(batch, 1)
			if err != nil {
				t.Fatal(err)
			}
			checkFiniteDifferences(t, m, batch, l0, m.Params(), 4)
		})
	}
}

// checkFiniteDifferences compares the gradients of params (left by a
// ForwardBackward of batch at scale 1, whose loss was l0) with central
// differences of the batch's mean loss, at trials random elements of each.
func checkFiniteDifferences(t *testing.T, m *Model, batch Batch, l0 Loss, params []*engine.Param, trials int) {
	t.Helper()
	mean := func() float64 {
		l, err := m.Evaluate(batch)
		if err != nil {
			t.Fatal(err)
		}
		return l.Mean()
	}
	r := rand.New(rand.NewPCG(3, 3))
	const h = 1e-2
	for _, p := range params {
		grad, val := download(m, p.Grad), download(m, p.Value)
		for trial := 0; trial < trials; trial++ {
			i := r.IntN(len(val))
			orig := val[i]
			val[i] = orig + h
			m.Backend().Upload(p.Value, val)
			up := mean()
			val[i] = orig - h
			m.Backend().Upload(p.Value, val)
			down := mean()
			val[i] = orig
			m.Backend().Upload(p.Value, val)
			fd := (up - down) / (2 * h)
			an := float64(grad[i]) / l0.Weight
			if err := numtest.Scalar(an, fd, numtest.Tol{Abs: 2e-3, Rel: 0.02}); err != nil {
				t.Errorf("%s[%d]: analytic against finite difference: %v", p.Name, i, err)
			}
		}
	}
}

func gradsOf(m *Model) map[string][]float32 {
	out := map[string][]float32{}
	for _, p := range m.Params() {
		out[p.Name] = download(m, p.Grad)
	}
	return out
}

// TestRecomputeIsExact: recomputation changes memory, not numbers.
func TestRecomputeIsExact(t *testing.T) {
	cfg := testConfig(false, 2)
	batch := randomBatch(cfg, 3, 11, 4)
	var ref map[string][]float32
	for _, recompute := range recomputeModes {
		m := randomModel(t, newBackend(2), cfg, Options{Recompute: recompute}, 8)
		m.ZeroGrads()
		if _, err := m.ForwardBackward(batch, 0.5); err != nil {
			t.Fatal(err)
		}
		g := gradsOf(m)
		m.Free()
		if ref == nil {
			ref = g
			continue
		}
		if err := numtest.Each(g, ref, numtest.Equal[float32]); err != nil {
			t.Errorf("gradients with %v recomputation: %v", recompute, err)
		}
	}
}

// TestAccumulationEqualsOneBatch: two micro-batches, each scaled by the
// global weight, give the gradient of the one big batch.
func TestAccumulationEqualsOneBatch(t *testing.T) {
	cfg := testConfig(true, 2)
	big := randomBatch(cfg, 4, 6, 12)
	half := func(i int) Batch {
		n := 2 * 6
		return Batch{B: 2, T: 6, IDs: big.IDs[i*n : (i+1)*n], Targets: big.Targets[i*n : (i+1)*n], Weights: big.Weights[i*n : (i+1)*n]}
	}
	m := randomModel(t, newBackend(2), cfg, Options{}, 2)
	defer m.Free()
	total := 0.0
	for _, w := range big.Weights {
		total += float64(w)
	}
	m.ZeroGrads()
	if _, err := m.ForwardBackward(big, float32(1/total)); err != nil {
		t.Fatal(err)
	}
	one := gradsOf(m)
	m.ZeroGrads()
	var sum Loss
	for i := 0; i < 2; i++ {
		l, err := m.ForwardBackward(half(i), float32(1/total))
		if err != nil {
			t.Fatal(err)
		}
		sum.Sum += l.Sum
		sum.Weight += l.Weight
	}
	two := gradsOf(m)
	if err := numtest.EachClose(two, one, numtest.Tol{Max: 1e-5}); err != nil {
		t.Errorf("accumulated gradients: %v", err)
	}
	lb, _ := m.Evaluate(big)
	if err := numtest.Scalar(sum.Mean(), lb.Mean(), numtest.Tol{Abs: 1e-6}); err != nil {
		t.Errorf("accumulated loss: %v", err)
	}
}

// TestGenerateMatchesFullRecomputation: the KV cache changes speed, not
// the tokens: each generated id is the argmax of a full forward pass over
// the prompt and what was generated so far.
func TestGenerateMatchesFullRecomputation(t *testing.T) {
	cfg := testConfig(false, 2)
	m := randomModel(t, newBackend(2), cfg, Options{}, 21)
	defer m.Free()
	prompts := [][]int32{{1, 2, 3}, {4, 5, 6, 7, 8, 9, 10}, {11}}
	got, err := m.Generate(prompts, GenerateOptions{MaxNewTokens: 9})
	if err != nil {
		t.Fatal(err)
	}
	for s, p := range prompts {
		seq := slices.Clone(p)
		for step := 0; step < 9; step++ {
			logits, err := m.Logits(Batch{B: 1, T: len(seq), IDs: seq})
			if err != nil {
				t.Fatal(err)
			}
			last := logits[(len(seq)-1)*cfg.VocabSize:]
			best := 0
			for j, v := range last {
				if v > last[best] {
					best = j
				}
			}
			seq = append(seq, int32(best))
		}
		if want := seq[len(p):]; !slices.Equal(got[s], want) {
			t.Errorf("prompt %d: cached %v, recomputed %v", s, got[s], want)
		}
	}
	// Stop ids end a sequence after the stop token.
	stop := got[1][2]
	short, err := m.Generate(prompts[1:2], GenerateOptions{MaxNewTokens: 9, StopIDs: []int32{stop}})
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.Index(got[1], stop); !slices.Equal(short[0], got[1][:i+1]) {
		t.Errorf("with stop id %d: %v (from %v)", stop, short[0], got[1])
	}
}

func TestBadInput(t *testing.T) {
	cfg := testConfig(false, 2)
	m := randomModel(t, newBackend(1), cfg, Options{}, 1)
	defer m.Free()
	good := randomBatch(cfg, 1, 4, 1)
	tests := []struct {
		name string
		fn   func() error
		want string
	}{
		{"id out of vocab", func() error {
			b := good
			b.IDs = []int32{1, 2, 23, 4}
			_, err := m.Evaluate(b)
			return err
		}, "outside the vocabulary"},
		{"weighted invalid target", func() error {
			b := good
			b.Targets, b.Weights = []int32{1, -1, 2, 3}, []float32{1, 1, 1, 1}
			_, err := m.ForwardBackward(b, 1)
			return err
		}, "target id -1"},
		{"too long", func() error {
			_, err := m.Evaluate(randomBatch(cfg, 1, 33, 1))
			return err
		}, "max_position_embeddings"},
		{"empty", func() error { _, err := m.Evaluate(Batch{}); return err }, "empty batch"},
		{"prompt id", func() error {
			_, err := m.Generate([][]int32{{1, 99}}, GenerateOptions{MaxNewTokens: 2})
			return err
		}, "outside the vocabulary"},
		{"prompt too long", func() error {
			_, err := m.Generate([][]int32{make([]int32, 30)}, GenerateOptions{MaxNewTokens: 3})
			return err
		}, "max_position_embeddings"},
		{"empty prompt", func() error {
			_, err := m.Generate([][]int32{{}}, GenerateOptions{MaxNewTokens: 3})
			return err
		}, "empty"},
	}
	for _, tt := range tests {
		if err := tt.fn(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", tt.name, err, tt.want)
		}
	}
}

// TestActivationBytesIsWhatIsAllocated: the accounting inspect and bench
// report is the engine's own allocation.
func TestActivationBytesIsWhatIsAllocated(t *testing.T) {
	cfg := testConfig(false, 2)
	for _, recompute := range recomputeModes {
		b := newBackend(1)
		m := randomModel(t, b, cfg, Options{Recompute: recompute}, 1)
		before := b.MemStats().Allocated
		if _, err := m.ForwardBackward(randomBatch(cfg, 2, 5, 1), 1); err != nil {
			t.Fatal(err)
		}
		got := b.MemStats().Allocated - before
		if want := ActivationBytes(cfg, 2, 5, true, recompute); got != want {
			t.Errorf("recompute=%v: allocated %d, accounted %d", recompute, got, want)
		}
		m.Free()
		if b.MemStats().Allocated != 0 {
			t.Errorf("leaked %d bytes", b.MemStats().Allocated)
		}
	}
}

// TestReportWeights: a report-only loss changes neither the trained loss
// nor the gradients, and equals the loss evaluated with those weights.
func TestReportWeights(t *testing.T) {
	cfg := testConfig(false, 2)
	m := randomModel(t, newBackend(2), cfg, Options{}, 4)
	defer m.Free()
	batch := randomBatch(cfg, 2, 6, 3)
	all := make([]float32, len(batch.Weights))
	for i := range all {
		all[i] = 1
		if batch.Targets[i] < 0 {
			batch.Targets[i] = int32(i % cfg.VocabSize) // a dropped but valid target: reported, not trained
		}
	}
	m.ZeroGrads()
	plain, err := m.ForwardBackward(batch, 1)
	if err != nil {
		t.Fatal(err)
	}
	g1 := gradsOf(m)
	withReport := batch
	withReport.ReportWeights = all
	m.ZeroGrads()
	rep, err := m.ForwardBackward(withReport, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := numtest.Each(gradsOf(m), g1, numtest.Equal[float32]); err != nil {
		t.Errorf("gradients with report weights: %v", err)
	}
	if rep.Sum != plain.Sum || rep.ReportWeight != float64(len(all)) {
		t.Errorf("trained loss %v (was %v), report weight %v", rep.Sum, plain.Sum, rep.ReportWeight)
	}
	ev, err := m.Evaluate(Batch{B: batch.B, T: batch.T, IDs: batch.IDs, Targets: batch.Targets, Weights: all})
	if err != nil {
		t.Fatal(err)
	}
	if err := numtest.Scalar(rep.ReportSum, ev.Sum, numtest.Tol{Rel: 1e-4}); err != nil {
		t.Errorf("report loss against the evaluated: %v", err)
	}
}

func TestTokenLosses(t *testing.T) {
	cfg := testConfig(true, 2)
	m := randomModel(t, newBackend(2), cfg, Options{}, 6)
	defer m.Free()
	batch := randomBatch(cfg, 2, 5, 8)
	per, err := m.TokenLosses(batch)
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Evaluate(batch)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for i, v := range per {
		if batch.Weights[i] == 0 && v != 0 {
			t.Errorf("position %d has weight 0 but loss %v", i, v)
		}
		sum += float64(v)
	}
	if err := numtest.Scalar(sum, l.Sum, numtest.Tol{Rel: 1e-5}); err != nil {
		t.Errorf("token losses' sum against Evaluate: %v", err)
	}
	// Against the logits: −log softmax at the target.
	logits, err := m.Logits(batch)
	if err != nil {
		t.Fatal(err)
	}
	var got, want []float64
	for i := range per {
		if batch.Weights[i] == 0 {
			continue
		}
		row := logits[i*cfg.VocabSize : (i+1)*cfg.VocabSize]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, float64(v))
		}
		z := 0.0
		for _, v := range row {
			z += math.Exp(float64(v) - mx)
		}
		got = append(got, float64(per[i]))
		want = append(want, mx+math.Log(z)-float64(row[batch.Targets[i]]))
	}
	if err := numtest.Close(got, want, numtest.Tol{Abs: 1e-4}); err != nil {
		t.Errorf("token losses against the logits (weighted positions): %v", err)
	}
}
