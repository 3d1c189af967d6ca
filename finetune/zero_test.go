package finetune

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/engine/perfmodel"
	"github.com/memtrain/memtrain/internal/numtest"
)

// zeroRank is what one rank of a ZeRO test run ends with.
type zeroRank struct {
	res     []StepResult
	weights map[string][]float32 // gathered full weights (rank 0 only)
	// copies are the rank's bf16 pass weights, widened (mixed precision).
	copies map[string][]float32
	// m, v are the moments of the rank's chunk of each parameter: the
	// whole moments' slice comm.Chunk names under ZeRO 0, the rank's
	// own under ZeRO 1.
	m, v map[string][]float32
}

// zeroOptimizer is the ZeRO tests' AdamW.
var zeroOptimizer = OptimizerConfig{Name: "adamw", Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}

// zeroRun trains sweepSteps AdamW steps (clipped, with weight decay and
// gradient accumulation) on one rank of grid g, with the optimizer's
// testOptimizer is oc's optimizer for m on one rank of g: with zero, its
// moments sharded over g's data ranks (ZeRO-1), else whole.
func testOptimizer(b engine.Backend, m *llama.Model, oc OptimizerConfig, g *parallel.Grid, zero bool) (*Optimizer, error) {
	if zero {
		return NewShardedOptimizer(b, m.Trainable(), oc, g.Data)
	}
	return NewOptimizer(b, m.Trainable(), oc)
}

// gatheredMasters brings o's masters up to date on every rank and gathers
// the model's weights: rank 0's by name, nil on the others.
func gatheredMasters(o *Optimizer, m *llama.Model, g *parallel.Grid) (map[string][]float32, error) {
	if err := o.syncMasters(); err != nil {
		return nil, err
	}
	w, err := m.GatherWeights()
	if err != nil || g.Rank() != 0 {
		return nil, err
	}
	return tensorsByName(w), nil
}

// moments sharded over the data group or not.
func zeroRun(cfg *checkpoints.Config, weights []checkpoints.Tensor, batches []llama.Batch, act engine.DType, g *parallel.Grid, zero bool, oc OptimizerConfig) (zeroRank, error) {
	var out zeroRank
	b := cpu.New(cpu.Options{Threads: 1})
	m, err := llama.New(b, cfg, llama.Options{Parallel: g, Activations: act})
	if err != nil {
		return out, err
	}
	defer m.Free()
	if err := m.SetWeights(weights); err != nil {
		return out, err
	}
	o, err := testOptimizer(b, m, oc, g, zero)
	if err != nil {
		return out, err
	}
	defer o.Free()
	for step, batch := range batches {
		g.World.SetStep(step + 1)
		r, err := TrainStep(m, o, shareOf(batch, g.BatchRanks(), g.BatchRank(), sweepMicro), 1e-2, 0.5)
		if err != nil {
			return out, err
		}
		out.res = append(out.res, r)
	}
	// The moments of this rank's chunks, from either optimizer.
	mv, vv := o.Moments()
	out.m, out.v, out.copies = map[string][]float32{}, map[string][]float32{}, map[string][]float32{}
	d := g.Data
	for i, p := range m.Trainable() {
		off, n := comm.Chunk(p.Grad.Len(), d.Size(), d.Rank())
		mt, vt := mv[i], vv[i]
		if n == 0 {
			continue
		}
		if !zero {
			mt, vt = mt.View(off, n), vt.View(off, n)
		}
		out.m[p.Name], out.v[p.Name] = download(b, mt), download(b, vt)
		if p.Copy != nil {
			out.copies[p.Name] = download(b, p.Copy)
		}
	}
	out.weights, err = gatheredMasters(o, m, g)
	return out, err
}

func download(b engine.Backend, t *engine.Tensor) []float32 {
	h := make([]float32, t.Len())
	b.Download(h, t)
	return h
}

// TestZeROEqualsAllReduce: ZeRO stage 1 (moments sharded over the data
// ranks, each updating its chunk, the updated chunks all-gathered) is bit
// for bit the unsharded step on data-parallel grids alone and combined
// with Z and X, in float32 and in mixed precision: every rank's losses,
// gradient norms and clipping, the final gathered weights (float32
// masters), every rank's bf16 pass weights, and each rank's moments
// against the same chunk of the unsharded moments.
func TestZeROEqualsAllReduce(t *testing.T) {
	cfg := sweepConfig()
	weights := checkpoints.RandomWeights(cfg, 3)
	batches := sweepBatches(cfg)[:3]
	grids := []comm.Grid{{Data: 2, X: 1, Y: 1, Z: 1}, {Data: 4, X: 1, Y: 1, Z: 1}, {Data: 2, X: 1, Y: 1, Z: 2}, {Data: 2, X: 2, Y: 1, Z: 1}}
	for _, shape := range grids {
		for _, act := range []engine.DType{engine.F32, engine.BF16} {
			name := fmt.Sprintf("%v/%v", shape, act)
			runs := [2]map[int]zeroRank{{}, {}}
			for k, zero := range []bool{false, true} {
				var mu sync.Mutex
				err := launch.Local(shape, parallel.AllOverlap(), func(g *parallel.Grid) error {
					r, err := zeroRun(cfg, weights, batches, act, g, zero, zeroOptimizer)
					mu.Lock()
					defer mu.Unlock()
					runs[k][g.Rank()] = r
					return err
				})
				if err != nil {
					t.Fatalf("%s zero=%v: %v", name, zero, err)
				}
			}
			want, got := runs[0], runs[1]
			for rank := range shape.Size() {
				w, g := want[rank], got[rank]
				if len(w.res) != len(batches) {
					t.Fatalf("%s rank %d: %d steps", name, rank, len(w.res))
				}
				for _, c := range []struct {
					what string
					f    func(StepResult) float64
				}{
					{"loss", func(r StepResult) float64 { return r.Loss }},
					{"gradient norm", func(r StepResult) float64 { return r.GradNorm }},
					{"clipped", func(r StepResult) float64 { return map[bool]float64{true: 1}[r.Clipped] }},
				} {
					if err := numtest.Equal(column(g.res, c.f), column(w.res, c.f)); err != nil {
						t.Errorf("%s rank %d: %s: %v", name, rank, c.what, err)
					}
				}
				if rank == 0 {
					if err := numtest.Each(g.weights, w.weights, numtest.Equal[float32]); err != nil {
						t.Errorf("%s: final weights: %v", name, err)
					}
				}
				if act != engine.BF16 {
				} else if err := numtest.Each(g.copies, w.copies, numtest.Equal[float32]); err != nil {
					t.Errorf("%s rank %d: bf16 pass weights: %v", name, rank, err)
				}
				if len(g.m) == 0 {
					t.Errorf("%s rank %d: no moments", name, rank)
				}
				for _, mom := range [][2]map[string][]float32{{g.m, w.m}, {g.v, w.v}} {
					if err := numtest.Each(mom[0], mom[1], numtest.Equal[float32]); err != nil {
						t.Errorf("%s rank %d: moments: %v", name, rank, err)
					}
				}
			}
			t.Logf("%s: step losses %v", name, column(got[0].res, func(r StepResult) float64 { return r.Loss }))
		}
	}
}

// TestZeROCheckpoints: a ZeRO-1 run saves the checkpoints of the same run
// without ZeRO, byte for byte (the weights' and moments' files: rank 0
// gathers the moments' chunks whole before writing), and resumed on
// another grid — with ZeRO on the new grid's data ranks, or without —
// goes on bit for bit as the run without ZeRO resumed there does: the
// same metrics, the same last checkpoint. In float32 and in mixed
// precision (whose masters ZeRO updates in chunks and gathers for the
// save), with synchronous and asynchronous saves, and with adapters
// (whose moments are sharded alike).
func TestZeROCheckpoints(t *testing.T) {
	cases := []struct {
		precision   string
		first, then comm.Grid
		thenZero    int
		async       bool
		lora        int
	}{
		{"f32", comm.Grid{Data: 2, X: 2, Y: 1, Z: 1}, comm.Grid{Data: 4, X: 1, Y: 1, Z: 1}, 1, false, 0},
		{"bf16", comm.Grid{Data: 2, X: 1, Y: 1, Z: 2}, comm.Grid{Data: 1, X: 2, Y: 1, Z: 1}, 0, true, 0},
		{"f32", comm.Grid{Data: 4, X: 1, Y: 1, Z: 1}, comm.Grid{Data: 2, X: 1, Y: 2, Z: 1}, 1, false, 4},
	}
	for _, c := range cases {
		name := fmt.Sprintf("%s/%v→%v/lora=%d", c.precision, c.first, c.then, c.lora)
		cfg := shortRun(t)
		cfg.Precision, cfg.SaveAsync = c.precision, c.async
		cfg.LoRA.Rank = c.lora
		run := func(zero, thenZero int) (string, []Metrics) {
			r := cfg
			r.Out = filepath.Join(t.TempDir(), fmt.Sprintf("zero%d", zero))
			r.Zero = zero
			ms := trainRun(t, r, &c.first, "", 2)
			r.Zero = thenZero
			return r.Out, append(ms, trainRun(t, r, &c.then, r.Out, 0)...)
		}
		wantDir, want := run(0, 0)
		gotDir, got := run(1, c.thenZero)
		if len(got) != len(want) || len(want) == 0 {
			t.Fatalf("%s: %d metrics lines, want %d", name, len(got), len(want))
		}
		for i := range want {
			w, g := want[i], got[i]
			w.TokensPerS, w.ModelFLOPsPS, g.TokensPerS, g.ModelFLOPsPS, w.SaveBlockedS, g.SaveBlockedS = 0, 0, 0, 0, 0, 0
			w.CheckpointDir, g.CheckpointDir = filepath.Base(w.CheckpointDir), filepath.Base(g.CheckpointDir)
			if !reflect.DeepEqual(g, w) {
				t.Errorf("%s step %d: ZeRO %+v\nwithout %+v", name, w.Step, g, w)
			}
		}
		for _, step := range []int{2, cfg.MaxSteps} {
			ck := filepath.Join(CheckpointsDir, StepName(step))
			man, err := VerifyCheckpoint(filepath.Join(wantDir, ck))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := VerifyCheckpoint(filepath.Join(gotDir, ck)); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			moments := 0
			for f := range man.Files {
				if !strings.HasSuffix(f, ".safetensors") {
					continue // config.yaml records zero
				}
				if strings.HasPrefix(f, "optimizer") {
					moments++
				}
				a, _ := os.ReadFile(filepath.Join(wantDir, ck, f))
				b, _ := os.ReadFile(filepath.Join(gotDir, ck, f))
				if len(a) == 0 || !bytes.Equal(a, b) {
					t.Errorf("%s step %d: %s differs from the run without ZeRO's", name, step, f)
				}
			}
			if moments == 0 {
				t.Errorf("%s step %d: no moments' file compared", name, step)
			}
		}
	}
}

// TestZeROMemory: the memory accounting (llama.Itemize) of ZeRO-1 is what
// NewShardedOptimizer allocates: the moments of each rank's chunks, the
// first data rank's exactly (the largest, which Itemize counts), no other
// rank's more; and about 1/Data of the unsharded moments. Gathering them
// for a save adds one parameter's buffer on the device, no more.
func TestZeROMemory(t *testing.T) {
	cfg := sweepConfig()
	oc := OptimizerConfig{Name: "adamw", Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}
	grids := []comm.Grid{{Data: 2, X: 1, Y: 1, Z: 1}, {Data: 4, X: 1, Y: 1, Z: 1}, {Data: 2, X: 1, Y: 1, Z: 2}, {Data: 2, X: 2, Y: 2, Z: 1}, {Data: 3, X: 1, Y: 2, Z: 1}}
	for _, shape := range grids {
		for _, act := range []engine.DType{engine.F32, engine.BF16} {
			name := fmt.Sprintf("%v/%v", shape, act)
			w := llama.Work{Grid: shape, Moments: 2, Activations: act}
			whole := llama.Itemize(cfg, w).Optimizer
			w.Zero = 1
			want := llama.Itemize(cfg, w).Optimizer
			if d := int64(shape.Data); want*d < whole || want*d > whole+2*4*d*int64(cfg.TensorCount()) {
				t.Errorf("%s: ZeRO's moments %d bytes, unsharded %d: not 1/%d of them up to a rounding a tensor", name, want, whole, d)
			}
			var mu sync.Mutex
			err := launch.Local(shape, parallel.Overlap{}, func(g *parallel.Grid) error {
				b := cpu.New(cpu.Options{Threads: 1})
				m, err := llama.New(b, cfg, llama.Options{Parallel: g, Activations: act})
				if err != nil {
					return err
				}
				defer m.Free()
				before := b.MemStats().Allocated
				o, err := NewShardedOptimizer(b, m.Trainable(), oc, g.Data)
				if err != nil {
					return err
				}
				defer o.Free()
				got := b.MemStats().Allocated - before
				// A save's gather holds one parameter's buffer beyond that
				// on the device, not the whole moments.
				largest := 0
				for _, p := range m.Trainable() {
					largest = max(largest, p.Value.Len())
				}
				st := b.MemStats()
				if err := o.gatherMoments(func(_, _, n int) []float32 { return make([]float32, n) }); err != nil {
					return err
				}
				peak := b.MemStats().Peak
				mu.Lock()
				if limit := max(st.Peak, st.Allocated+4*int64(largest)); peak > limit {
					t.Errorf("%s rank %d: gathering the moments for a save peaked at %d bytes, above %d (one parameter's buffer)", name, g.Rank(), peak, limit)
				}
				defer mu.Unlock()
				if g.At.Data == 0 && g.At.X == 0 && g.At.Y == 0 && g.At.Z == 0 && got != want {
					t.Errorf("%s rank %d: ZeRO allocated %d bytes of moments, accounted %d", name, g.Rank(), got, want)
				}
				if got > want {
					t.Errorf("%s rank %d: ZeRO allocated %d bytes of moments, more than the %d accounted", name, g.Rank(), got, want)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
	}
}

// TestZeROCountsEqualPerfmodel: the collectives a ZeRO-1 step makes over
// the data group — the gradients' all-reduces and the updated weights'
// all-gathers — counted by the communicators, are the performance
// model's (perfmodel.CollectivesWith, Zero 1), calls and elements.
func TestZeROCountsEqualPerfmodel(t *testing.T) {
	cfg := sweepConfig()
	weights := checkpoints.RandomWeights(cfg, 3)
	batch := sweepBatches(cfg)[0]
	oc := OptimizerConfig{Name: "adamw", Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	for _, shape := range []comm.Grid{{Data: 2, X: 1, Y: 1, Z: 1}, {Data: 2, X: 1, Y: 1, Z: 2}, {Data: 2, X: 2, Y: 2, Z: 1}, {Data: 4, X: 1, Y: 2, Z: 1}} {
		for _, prec := range []engine.Precision{engine.PrecisionF32, engine.PrecisionBF16} {
			name := fmt.Sprintf("%v/%v", shape, prec)
			ranks := shape.Data * shape.Z
			step := perfmodel.Step{Grid: perfmodel.Grid{Data: shape.Data, X: shape.X, Y: shape.Y, Z: shape.Z},
				SeqLen: sweepT, MicroBatch: sweepMicro / ranks, MicroBatches: sweepBatch / sweepMicro}
			cs, err := perfmodel.CollectivesWith(cfg, step, perfmodel.Options{Precision: prec, Zero: 1})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string][2]int64{}
			for _, c := range cs {
				if c.Group == perfmodel.GroupData {
					v := want[c.Op]
					want[c.Op] = [2]int64{v[0] + int64(c.Calls), v[1] + int64(c.Calls)*c.Elements}
				}
			}
			if want[perfmodel.OpAllGather][0] == 0 {
				t.Fatalf("%s: the model lists no ZeRO all-gather", name)
			}
			var mu sync.Mutex
			err = launch.Local(shape, parallel.AllOverlap(), func(g *parallel.Grid) error {
				b := cpu.New(cpu.Options{Threads: 1})
				m, err := llama.New(b, cfg, llama.Options{Parallel: g, Activations: prec.Activations()})
				if err != nil {
					return err
				}
				defer m.Free()
				if err := m.SetWeights(weights); err != nil {
					return err
				}
				o, err := NewShardedOptimizer(b, m.Trainable(), oc, g.Data)
				if err != nil {
					return err
				}
				defer o.Free()
				g.World.SetStep(1)
				if _, err := TrainStep(m, o, shareOf(batch, ranks, g.BatchRank(), sweepMicro), 1e-3, 1); err != nil {
					return err
				}
				got := map[string][2]int64{}
				for _, op := range g.World.Stats().Ops {
					if op.Group == "data" && op.Step.Calls > 0 {
						got[op.Op.String()] = [2]int64{op.Step.Calls, op.Step.Elements}
					}
				}
				mu.Lock()
				defer mu.Unlock()
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s rank %d: data group (calls, elements) by operation: counted %v, modelled %v", name, g.Rank(), got, want)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
	}
}

// TestZeROSkipsNonFinite: a ZeRO step whose loss is not finite (one
// target weighted 1e38: its w·CE overflows the float32 loss sum, while
// the gradient, scaled by 1/Σw, stays finite) changes nothing on any
// rank — no weight, no bf16 copy, no moment, no optimizer step — as the
// unsharded step: every rank's AdamWStep skips on the same all-reduced
// control values, and the all-gather copies the unchanged chunks.
func TestZeROSkipsNonFinite(t *testing.T) {
	cfg := sweepConfig()
	weights := checkpoints.RandomWeights(cfg, 3)
	batch := sweepBatches(cfg)[0]
	batch.Weights = append([]float32(nil), batch.Weights...)
	batch.Weights[1] = 1e38
	oc := OptimizerConfig{Name: "adamw", Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	for _, act := range []engine.DType{engine.F32, engine.BF16} {
		shape := comm.Grid{Data: 2, X: 1, Y: 1, Z: 2}
		err := launch.Local(shape, parallel.AllOverlap(), func(g *parallel.Grid) error {
			b := cpu.New(cpu.Options{Threads: 1})
			m, err := llama.New(b, cfg, llama.Options{Parallel: g, Activations: act})
			if err != nil {
				return err
			}
			defer m.Free()
			if err := m.SetWeights(weights); err != nil {
				return err
			}
			o, err := NewShardedOptimizer(b, m.Trainable(), oc, g.Data)
			if err != nil {
				return err
			}
			defer o.Free()
			pass := func() map[string][]float32 {
				out := map[string][]float32{}
				for _, p := range m.Trainable() {
					out[p.Name] = download(b, passWeight(p))
					out["master "+p.Name] = download(b, p.Value)
				}
				return out
			}
			before := pass()
			_, err = TrainStep(m, o, shareOf(batch, g.BatchRanks(), g.BatchRank(), sweepMicro), 1e-2, 1)
			if !errors.Is(err, ErrNonFinite) {
				return fmt.Errorf("%v rank %d: TrainStep: %v, want ErrNonFinite", act, g.Rank(), err)
			}
			if o.Step != 0 {
				return fmt.Errorf("%v rank %d: optimizer step %d after a skipped step", act, g.Rank(), o.Step)
			}
			if err := numtest.Each(pass(), before, numtest.Equal[float32]); err != nil {
				return fmt.Errorf("%v rank %d: weights changed: %w", act, g.Rank(), err)
			}
			mv, vv := o.Moments()
			for i := range mv {
				for _, t := range []*engine.Tensor{mv[i], vv[i]} {
					if t == nil {
						continue
					}
					if err := numtest.Equal(download(b, t), make([]float32, t.Len())); err != nil {
						return fmt.Errorf("%v rank %d: moments changed: %w", act, g.Rank(), err)
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	}
}
