package parallel_test

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/engine/perfmodel"
)

func countsConfig(tie bool) *checkpoints.Config {
	c := &checkpoints.Config{
		HiddenSize: 32, IntermediateSize: 48, NumHiddenLayers: 2, NumAttentionHeads: 8, NumKeyValueHeads: 4,
		RMSNormEps: 1e-5, RopeTheta: 10000, MaxPositionEmbeddings: 32, VocabSize: 64, TieWordEmbeddings: tie,
		TorchDType: "float32", HiddenAct: "silu", InitializerRange: 0.3,
	}
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return c
}

// key is one (group, operation) of the counters.
type key struct {
	group string
	op    string
}

type tally struct{ calls, elements int64 }

// modelCounts adds up perfmodel's itemized collectives by group and
// operation.
func modelCounts(t *testing.T, cfg *checkpoints.Config, s perfmodel.Step) map[key]tally {
	cs, err := perfmodel.Collectives(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	out := map[key]tally{}
	for _, c := range cs {
		k := key{c.Group, c.Op}
		v := out[k]
		v.calls += int64(c.Calls)
		v.elements += int64(c.Calls) * c.Elements
		out[k] = v
	}
	return out
}

// engineCounts reads a rank's per-step counters of the groups the
// performance model covers (not "world", where scalars and checkpoint
// gathers run).
func engineCounts(st comm.Stats) map[key]tally {
	out := map[key]tally{}
	for _, o := range st.Ops {
		if o.Group == "world" || o.Step.Calls == 0 {
			continue
		}
		k := key{o.Group, o.Op.String()}
		v := out[k]
		v.calls += o.Step.Calls
		v.elements += o.Step.Elements
		out[k] = v
	}
	return out
}

func format(m map[key]tally) string {
	var lines []string
	for k, v := range m {
		lines = append(lines, fmt.Sprintf("%s %s: %d calls, %d elements", k.group, k.op, v.calls, v.elements))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestCountsEqualPerfmodel: the collectives a training step makes on each
// group, counted by the communicators, are exactly the performance
// model's itemized list (calls and elements), on every grid of up to 16
// ranks with each axis 1, 2 or 4, tied and untied heads, with each
// recomputation and with and without overlap.
func TestCountsEqualPerfmodel(t *testing.T) {
	const T, micro, microBatches = 8, 1, 2
	var grids []comm.Grid
	for _, d := range []int{1, 2, 4} {
		for _, x := range []int{1, 2, 4} {
			for _, y := range []int{1, 2, 4} {
				for _, z := range []int{1, 2, 4} {
					if g := (comm.Grid{Data: d, X: x, Y: y, Z: z}); g.Size() > 1 && g.Size() <= 16 {
						grids = append(grids, g)
					}
				}
			}
		}
	}
	for i, shape := range grids {
		tie := i%2 == 0
		rec := []llama.Recompute{llama.RecomputeFull, llama.RecomputeNone, llama.RecomputeSelective}[(i/2)%3]
		ov := parallel.AllOverlap()
		if i%3 == 0 {
			ov = parallel.Overlap{}
		}
		cfg := countsConfig(tie)
		weights := checkpoints.RandomWeights(cfg, 1)
		step := perfmodel.Step{Grid: perfmodel.Grid{Data: shape.Data, X: shape.X, Y: shape.Y, Z: shape.Z},
			SeqLen: T, MicroBatch: micro, MicroBatches: microBatches, Recompute: rec}
		want := modelCounts(t, cfg, step)
		name := fmt.Sprintf("tie=%v %v recompute=%v %v", tie, shape, rec, ov)
		var mu sync.Mutex
		err := launch.Local(shape, ov, func(g *parallel.Grid) error {
			m, err := llama.New(cpu.New(cpu.Options{Threads: 1}), cfg, llama.Options{Parallel: g, Recompute: rec})
			if err != nil {
				return err
			}
			defer m.Free()
			if err := m.SetWeights(weights); err != nil {
				return err
			}
			g.World.SetStep(1)
			r := rand.New(rand.NewPCG(uint64(g.BatchRank()), 9))
			m.ZeroGrads()
			for range microBatches {
				b := llama.Batch{B: micro, T: T, IDs: make([]int32, micro*T), Targets: make([]int32, micro*T)}
				for i := range b.IDs {
					b.IDs[i], b.Targets[i] = int32(r.IntN(cfg.VocabSize)), int32(r.IntN(cfg.VocabSize))
				}
				if _, err := m.ForwardBackward(b, 0.1); err != nil {
					return err
				}
			}
			if err := m.ReduceGradients(); err != nil {
				return err
			}
			if _, err := m.GradNorm(); err != nil {
				return err
			}
			got := engineCounts(g.World.Stats())
			mu.Lock()
			defer mu.Unlock()
			if format(got) != format(want) {
				t.Errorf("%s rank %d: counted\n%s\nperfmodel\n%s", name, g.Rank(), format(got), format(want))
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}
