package llama

import (
	"fmt"
	"math"
	"reflect"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/parallel"
)

// TestGradientBucketsExact: whatever the gradient bucket size, a step's
// reduced gradients are bit for bit those of one all-reduce a gradient
// (a bucket each), and every rank's counts of collectives are the same,
// with OAR on and off: the whole model on a grid that sums over data and
// data·Z, adapters on one that sums over X, Y and data.
func TestGradientBucketsExact(t *testing.T) {
	t.Run("model", func(t *testing.T) { testGradientBuckets(t, false, comm.Grid{Data: 2, X: 1, Y: 1, Z: 2}) })
	t.Run("lora", func(t *testing.T) { testGradientBuckets(t, true, comm.Grid{Data: 2, X: 2, Y: 2, Z: 1}) })
}

func testGradientBuckets(t *testing.T, lora bool, shape comm.Grid) {
	cfg := gridConfig(false)
	var opts Options
	if lora {
		opts.LoRA = testAdapter(3, false, 0.2)
	}
	ref := randomModel(t, newBackend(1), cfg, Options{}, 7)
	w := ref.Weights()
	var ad []checkpoints.Tensor
	if lora {
		lm := loraModel(t, newBackend(1), cfg, opts, 7)
		w, ad = lm.Weights(), lm.AdapterTensors()
	}
	global := randomBatch(cfg, 8, 6, 3)
	global.Keys = []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	type result struct {
		grads map[string][]float32
		stats comm.Stats
	}
	run := func(bucket int, ov parallel.Overlap) []result {
		res := make([]result, shape.Size())
		var mu sync.Mutex
		err := launch.Local(shape, ov, func(g *parallel.Grid) error {
			o := opts
			o.Parallel, o.GradientBucketBytes = g, bucket
			m, err := New(newBackend(1), cfg, o)
			if err != nil {
				return err
			}
			defer m.Free()
			if err := m.SetWeights(w); err != nil {
				return err
			}
			if lora {
				if err := m.LoadAdapters(tensorReader(ad)); err != nil {
					return err
				}
			}
			_, grads, err := oneStep(m, global)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			res[g.Rank()] = result{grads, g.World.Stats()}
			return nil
		})
		if err != nil {
			t.Fatalf("bucket %d, %v: %v", bucket, ov, err)
		}
		return res
	}
	for _, ov := range []parallel.Overlap{{}, parallel.AllOverlap()} {
		want := run(-1, ov)
		groups := []string{"data", "data-z"}
		if lora {
			groups = []string{"x", "y", "data-z"}
		}
		for _, group := range groups {
			if n := want[0].stats.Get(group, comm.AllReduce).Total.Calls; n == 0 {
				t.Fatalf("%v: no all-reduce over %s", ov, group)
			}
		}
		// 0 is the default (every gradient of the small model in one
		// bucket a group); 64 and 1000 bytes cut them into many.
		for _, bucket := range []int{0, 64, 1000} {
			t.Run(fmt.Sprintf("%v/bucket=%d", ov, bucket), func(t *testing.T) {
				got := run(bucket, ov)
				for r := range got {
					if !reflect.DeepEqual(got[r].stats, want[r].stats) {
						t.Errorf("rank %d: counts %+v, want %+v", r, got[r].stats, want[r].stats)
					}
					for name, v := range want[r].grads {
						g := got[r].grads[name]
						for i := range v {
							if math.Float32bits(g[i]) != math.Float32bits(v[i]) {
								t.Errorf("rank %d: %s[%d] = %v, want %v", r, name, i, g[i], v[i])
								break
							}
						}
					}
				}
			})
		}
	}
}
