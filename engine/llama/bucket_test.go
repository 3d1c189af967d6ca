package llama

import (
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/internal/numtest"
)

// TestGradientBucketsExact: whatever the gradient bucket size, and
// whether the buckets are issued during the last micro-batch's backward
// (the default) or after it (Options.ReduceAfterBackward), a step's
// reduced gradients are bit for bit those of one all-reduce a gradient
// (a bucket each) after the backward, and every rank's counts of
// collectives are the same, with OAR on and off: the whole model on a
// grid that sums over data and data·Z, adapters on one that sums over X,
// Y and data.
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
	run := func(bucket int, after bool, ov parallel.Overlap) []result {
		res := make([]result, shape.Size())
		var mu sync.Mutex
		err := launch.Local(shape, ov, func(g *parallel.Grid) error {
			o := opts
			o.Parallel, o.GradientBucketBytes, o.ReduceAfterBackward = g, bucket, after
			m, err := loadedModel(newBackend(1), cfg, o, w, ad, lora)
			if err != nil {
				return err
			}
			defer m.Free()
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
			t.Fatalf("bucket %d, after the backward %t, %v: %v", bucket, after, ov, err)
		}
		return res
	}
	for _, ov := range []parallel.Overlap{{}, parallel.AllOverlap()} {
		want := run(-1, true, ov)
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
		for _, c := range []struct {
			bucket int
			after  bool
		}{{-1, false}, {0, false}, {64, false}, {1000, false}, {0, true}, {1000, true}} {
			bucket := c.bucket
			t.Run(fmt.Sprintf("%v/bucket=%d/after=%t", ov, bucket, c.after), func(t *testing.T) {
				got := run(bucket, c.after, ov)
				for r := range got {
					if !reflect.DeepEqual(got[r].stats, want[r].stats) {
						t.Errorf("rank %d: counts %+v, want %+v", r, got[r].stats, want[r].stats)
					}
					if err := numtest.Each(got[r].grads, want[r].grads, numtest.Equal[float32]); err != nil {
						t.Errorf("rank %d: gradients: %v", r, err)
					}
				}
			})
		}
	}
}

// recordingComm passes every collective on to its communicator and logs
// it, in issue order, into its rank's log, with a copy of an all-reduced
// tensor as it is at the call: what the collective starts from.
type recordingComm struct {
	comm.Comm
	b   engine.Backend
	log *[]recorded
}

type recorded struct {
	group string
	op    comm.Op
	t     *engine.Tensor // the all-reduced tensor
	snap  []float32      // its values when issued
}

func (c *recordingComm) note(op comm.Op, t *engine.Tensor) {
	r := recorded{group: c.Group(), op: op, t: t}
	if t != nil {
		r.snap = make([]float32, t.Len())
		c.b.Download(r.snap, t)
	}
	*c.log = append(*c.log, r)
}

func (c *recordingComm) AllReduce(t *engine.Tensor) error {
	c.note(comm.AllReduce, t)
	return c.Comm.AllReduce(t)
}
func (c *recordingComm) IAllReduce(t *engine.Tensor) comm.Request {
	c.note(comm.AllReduce, t)
	return c.Comm.IAllReduce(t)
}
func (c *recordingComm) ReduceScatter(dst, src *engine.Tensor) error {
	c.note(comm.ReduceScatter, nil)
	return c.Comm.ReduceScatter(dst, src)
}
func (c *recordingComm) IReduceScatter(dst, src *engine.Tensor) comm.Request {
	c.note(comm.ReduceScatter, nil)
	return c.Comm.IReduceScatter(dst, src)
}
func (c *recordingComm) AllGather(dst, src *engine.Tensor) error {
	c.note(comm.AllGather, nil)
	return c.Comm.AllGather(dst, src)
}
func (c *recordingComm) IAllGather(dst, src *engine.Tensor) comm.Request {
	c.note(comm.AllGather, nil)
	return c.Comm.IAllGather(dst, src)
}

// recordedGrid is g with its X, Y, Z, data and data·Z groups recording
// into log.
func recordedGrid(g *parallel.Grid, b engine.Backend, log *[]recorded) *parallel.Grid {
	groups := *g.Groups
	for _, c := range []*comm.Comm{&groups.X, &groups.Y, &groups.Z, &groups.Data, &groups.DataZ} {
		*c = &recordingComm{Comm: *c, b: b, log: log}
	}
	return &parallel.Grid{Groups: &groups, At: g.At, Overlap: g.Overlap}
}

// TestGradientBucketsReadiness checks the readiness rule of buckets.go
// with communicators that record each collective and the values it
// starts from: with the buckets issued in the backward, every gradient's
// first sum starts from exactly the values it starts from when issued
// after the whole backward (so no write into it came after: the tied
// embedding's, written by the head and then by the embedding's backward;
// a Z-sharded weight's, whose reduce-scattered chunk is added later with
// ORS; nothing from the step's first micro-batch of two, which issues
// nothing), each gradient is summed as often, the collectives are the
// same, and some bucket went out before the backward's last collective of
// another group: the sums overlap the backward. The gradients' first
// sums come in the backward's order: from the last layer to the first.
func TestGradientBucketsReadiness(t *testing.T) {
	for _, c := range []struct {
		name  string
		tie   bool
		lora  bool
		shape comm.Grid
	}{
		{"z/tied", true, false, comm.Grid{Data: 2, X: 1, Y: 1, Z: 2}},
		{"z/untied", false, false, comm.Grid{Data: 2, X: 1, Y: 1, Z: 2}},
		{"data-y/tied", true, false, comm.Grid{Data: 2, X: 1, Y: 2, Z: 1}},
		{"data-x/untied", false, false, comm.Grid{Data: 2, X: 2, Y: 1, Z: 1}},
		{"lora/data-x", false, true, comm.Grid{Data: 2, X: 2, Y: 1, Z: 1}},
		{"lora/data-z", true, true, comm.Grid{Data: 2, X: 1, Y: 1, Z: 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, ov := range []parallel.Overlap{parallel.AllOverlap(), {}} {
				testReadiness(t, c.tie, c.lora, c.shape, ov)
			}
		})
	}
}

func testReadiness(t *testing.T, tie, lora bool, shape comm.Grid, ov parallel.Overlap) {
	cfg := gridConfig(tie)
	var opts Options
	w := randomModel(t, newBackend(1), cfg, Options{}, 7).Weights()
	var ad []checkpoints.Tensor
	if lora {
		opts.LoRA = testAdapter(3, false, 0)
		lm := loraModel(t, newBackend(1), cfg, opts, 7)
		w, ad = lm.Weights(), lm.AdapterTensors()
	}
	global := randomBatch(cfg, 8, 6, 3)
	// A rank's log and the names of its gradient tensors (the ones whose
	// sums the log shows, by pointer), in Trainable's order.
	type rankLog struct {
		log      []recorded
		names    map[*engine.Tensor]string
		backward int // the log's length when the backward was done
	}
	run := func(after bool) []rankLog {
		logs := make([]rankLog, shape.Size())
		err := launch.Local(shape, ov, func(g *parallel.Grid) error {
			b := newBackend(1)
			l := &logs[g.Rank()]
			o := opts
			o.Parallel, o.GradientBucketBytes, o.ReduceAfterBackward = recordedGrid(g, b, &l.log), 1000, after
			m, err := loadedModel(b, cfg, o, w, ad, lora)
			if err != nil {
				return err
			}
			defer m.Free()
			l.names = map[*engine.Tensor]string{}
			for _, p := range m.Trainable() {
				l.names[p.Grad] = p.Name
			}
			l.log = l.log[:0] // from the step on
			// oneStep's step, with the log's length noted when the
			// backward is done.
			per := global.B / g.BatchRanks()
			s0 := g.BatchRank() * per
			total := 0.0
			for _, x := range global.Weights {
				total += float64(x)
			}
			m.ZeroGrads()
			for i, r := range [][2]int{{s0, s0 + per/2}, {s0 + per/2, s0 + per}} {
				if i == 1 {
					m.LastMicroBatch()
				}
				if _, err := m.ForwardBackward(sliceBatch(global, r[0], r[1]), float32(1/total)); err != nil {
					return err
				}
			}
			l.backward = len(l.log)
			return m.ReduceGradients()
		})
		if err != nil {
			t.Fatalf("%v, after the backward %t: %v", ov, after, err)
		}
		return logs
	}
	want, got := run(true), run(false)
	for r := range got {
		w, g := want[r], got[r]
		// The first sum of each gradient: its values, and the position in
		// the log.
		firsts := func(l rankLog) (map[string][]float32, map[string]int, map[string]int) {
			snap, at, n := map[string][]float32{}, map[string]int{}, map[string]int{}
			for i, e := range l.log {
				name, ok := l.names[e.t]
				if !ok || e.op != comm.AllReduce {
					continue
				}
				if n[name]++; n[name] == 1 {
					snap[name], at[name] = e.snap, i
				}
			}
			return snap, at, n
		}
		wantSnap, _, wantN := firsts(w)
		gotSnap, gotAt, gotN := firsts(g)
		if len(wantN) == 0 {
			t.Fatalf("%v rank %d: no gradient was summed", ov, r)
		}
		if !reflect.DeepEqual(gotN, wantN) {
			t.Errorf("%v rank %d: sums per gradient %v, after the backward %v", ov, r, gotN, wantN)
		}
		if err := numtest.Each(gotSnap, wantSnap, numtest.Equal[float32]); err != nil {
			t.Errorf("%v rank %d: a sum issued before its gradient's last write: %v", ov, r, err)
		}
		// The same collectives, in another order.
		key := func(l rankLog) map[string]int {
			k := map[string]int{}
			for _, e := range l.log {
				k[fmt.Sprintf("%s %v %d", e.group, e.op, len(e.snap))]++
			}
			return k
		}
		if !reflect.DeepEqual(key(g), key(w)) {
			t.Errorf("%v rank %d: collectives %v, after the backward %v", ov, r, key(g), key(w))
		}
		// Every gradient's first sum is issued in the backward; when
		// issued after it, every one after it.
		for name, i := range gotAt {
			if i >= g.backward {
				t.Errorf("%v rank %d: %s's first sum issued after the backward", ov, r, name)
			}
		}
		_, wantAt, _ := firsts(w)
		for name, i := range wantAt {
			if i < w.backward {
				t.Errorf("%v rank %d: %s's first sum issued in the backward with ReduceAfterBackward", ov, r, name)
			}
		}
		// The model's own weights: some bucket goes out before the
		// backward's last collective of another group.
		lastOther, firstGrad := -1, len(g.log)
		for i, e := range g.log[:g.backward] {
			if _, ok := g.names[e.t]; ok && e.op == comm.AllReduce {
				firstGrad = min(firstGrad, i)
			} else {
				lastOther = i
			}
		}
		if !lora && firstGrad > lastOther {
			t.Errorf("%v rank %d: every gradient sum after the backward's last other collective (%d, %d)", ov, r, firstGrad, lastOther)
		}
		// Backward order, in each group: a later layer's gradients go
		// no later than an earlier one's.
		layerOf := func(name string) int {
			var l int
			if _, err := fmt.Sscanf(name, "model.layers.%d.", &l); err != nil {
				return -1
			}
			return l
		}
		type groupLayer struct {
			group string
			layer int
		}
		first, last := map[groupLayer]int{}, map[groupLayer]int{}
		for name, i := range gotAt {
			l := layerOf(name)
			if l < 0 {
				continue
			}
			k := groupLayer{g.log[i].group, l}
			if v, ok := first[k]; !ok || i < v {
				first[k] = i
			}
			last[k] = max(last[k], i)
		}
		for k, i := range first {
			if j, ok := last[groupLayer{k.group, k.layer + 1}]; ok && j > i {
				t.Errorf("%v rank %d: on %s, layer %d's first gradient sum (log %d) before layer %d's last (log %d)", ov, r, k.group, k.layer, i, k.layer+1, j)
			}
		}
	}
}

// loadedModel is a rank's model of cfg with weights w and, with lora,
// the adapters ad.
func loadedModel(b engine.Backend, cfg *checkpoints.Config, o Options, w, ad []checkpoints.Tensor, lora bool) (*Model, error) {
	m, err := New(b, cfg, o)
	if err != nil {
		return nil, err
	}
	if err := m.SetWeights(w); err != nil {
		m.Free()
		return nil, err
	}
	if lora {
		if err := m.LoadAdapters(tensorReader(ad)); err != nil {
			m.Free()
			return nil, err
		}
	}
	return m, nil
}
