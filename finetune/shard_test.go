package finetune

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/internal/numtest"
)

// shardConfig is a model big enough that a rank's shards dwarf the save's
// fixed buffers: hidden 256, vocabulary 2048, intermediate 512.
func shardConfig() *checkpoints.Config {
	c := sweepConfig()
	c.HiddenSize, c.IntermediateSize, c.VocabSize = 256, 512, 2048
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return c
}

// heapSampler samples the Go heap's live and unswept objects every
// 100 µs until stopped, and reports the largest.
type heapSampler struct {
	stop chan struct{}
	done chan struct{}
	peak atomic.Uint64
}

func sampleHeap() *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), done: make(chan struct{})}
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() {
		metrics.Read(s)
		if v := s[0].Value.Uint64(); v > h.peak.Load() {
			h.peak.Store(v)
		}
	}
	read()
	go func() {
		defer close(h.done)
		for {
			select {
			case <-h.stop:
				read()
				return
			case <-time.After(100 * time.Microsecond):
				read()
			}
		}
	}()
	return h
}

func (h *heapSampler) Stop() uint64 {
	close(h.stop)
	<-h.done
	return h.peak.Load()
}

func heapNow() uint64 { return readMetric("/memory/classes/heap/objects:bytes") }

func readMetric(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestShardedSaveMemory: on dp=2, x=2, y=2, z=2 a save streams each
// rank's shards to its files: no rank's engine allocations grow by more
// than the byte collectives' small buffers, and the Go heap of the whole
// process (16 ranks) neither grows, nor even allocates in all, more than
// the writing ranks' bounded buffers — far below one copy of the model,
// which the gathering save held on every rank.
func TestShardedSaveMemory(t *testing.T) {
	cfg := shardConfig()
	shape := comm.Grid{Data: 2, X: 2, Y: 2, Z: 2}
	weights := checkpoints.RandomWeights(cfg, 3)
	var modelFloats int64
	for _, w := range weights {
		modelFloats += int64(len(w.Data))
	}
	dir := filepath.Join(t.TempDir(), "checkpoints")
	var (
		mu         sync.Mutex
		enginePeak int64 // the largest growth of a rank's engine peak
		shardBytes int64 // the largest rank's weights and moments
		largest    int64 // the largest shard of a rank
		ready      sync.WaitGroup
		baseline   uint64
		allocs     uint64
		sampler    *heapSampler
	)
	ready.Add(shape.Size())
	start := make(chan struct{})
	err := launch.Local(shape, parallel.Overlap{}, func(g *parallel.Grid) error {
		b := cpu.New(cpu.Options{Threads: 1})
		m, err := llama.New(b, cfg, llama.Options{Parallel: g})
		if err != nil {
			return err
		}
		defer m.Free()
		if err := m.SetWeights(weights); err != nil {
			return err
		}
		o, err := NewOptimizer(b, m.Params(), OptimizerConfig{Name: "adamw", Beta1: 0.9, Beta2: 0.95, Eps: 1e-8})
		if err != nil {
			return err
		}
		defer o.Free()
		var mine, big int64
		for _, p := range m.Params() {
			mine += 3 * p.Value.Bytes()
			big = max(big, p.Value.Bytes())
		}
		ready.Done()
		if g.Rank() == 0 {
			ready.Wait()
			weights = nil
			runtime.GC()
			baseline = heapNow()
			allocs = readMetric("/gc/heap/allocs:bytes")
			sampler = sampleHeap()
			close(start)
		}
		<-start
		before := b.MemStats().Peak
		err = SaveCheckpoint(dir, StepName(1), m, o, TrainerState{Step: 1}, SaveOptions{})
		grew := b.MemStats().Peak - before
		mu.Lock()
		enginePeak, shardBytes, largest = max(enginePeak, grew), max(shardBytes, mine), max(largest, big)
		mu.Unlock()
		return err
	})
	peak := sampler.Stop()
	allocated := readMetric("/gc/heap/allocs:bytes") - allocs
	if err != nil {
		t.Fatal(err)
	}
	writers := int64(shape.X * shape.Y * shape.Z)
	// Each writing rank: its host buffer (its largest shard) and, per
	// file (two), atomicfile's 1 MiB buffer and the 64 KiB one values are
	// converted in; 2 MiB for the rest (the 16 ranks' collectives'
	// buffers, the manifest).
	perWriter := largest + 2*(1<<20+64<<10)
	bound := writers*perWriter + 2<<20
	growth := int64(peak) - int64(baseline)
	t.Logf("model %d floats (%.1f MiB with both moments); a rank's weights and moments %.2f MiB; engine peak growth per rank ≤ %d bytes; Go heap: peak growth %.2f MiB, allocated %.2f MiB (bound %.2f MiB; gathering the model and moments on 16 ranks: %.0f MiB)",
		modelFloats, float64(12*modelFloats)/(1<<20), float64(shardBytes)/(1<<20), enginePeak, float64(growth)/(1<<20), float64(allocated)/(1<<20), float64(bound)/(1<<20), float64(16*12*modelFloats)/(1<<20))
	if int64(allocated) > bound {
		t.Errorf("the save allocated %d bytes of Go heap, more than the bound of %d", allocated, bound)
	}
	// The byte collectives' buffers: a world all-gather of 2 checksums a
	// rank, a broadcast of a name.
	if enginePeak > 64<<10 {
		t.Errorf("a rank's engine allocations grew by %d bytes during the save", enginePeak)
	}
	if growth > bound {
		t.Errorf("the heap grew by %d bytes during the save, more than the bound of %d", growth, bound)
	}
	if _, err := VerifyCheckpoint(filepath.Join(dir, StepName(1))); err != nil {
		t.Fatal(err)
	}
}

// TestShardedSaveFailsEverywhere: one rank's failed write fails the save
// on every rank, with that rank's error; nothing is committed and the
// temporary folder is gone.
func TestShardedSaveFailsEverywhere(t *testing.T) {
	cfg := sweepConfig()
	shape := comm.Grid{Data: 1, X: 2, Y: 2, Z: 2}
	weights := checkpoints.RandomWeights(cfg, 3)
	dir := filepath.Join(t.TempDir(), "checkpoints")
	errs := make([]error, shape.Size())
	launch.Local(shape, parallel.Overlap{}, func(g *parallel.Grid) error {
		m, o, free, err := rankModel(cfg, weights, g, OptimizerConfig{Name: "sgd"})
		if err != nil {
			return err
		}
		defer free()
		opt := SaveOptions{beforeWrite: func(rank int, tmp string) {
			if rank == 5 {
				w, _ := shardFiles(5, 8)
				os.Mkdir(filepath.Join(tmp, w), 0o755) // the file cannot replace a folder
			}
		}}
		errs[g.Rank()] = SaveCheckpoint(dir, StepName(1), m, o, TrainerState{Step: 1}, opt)
		return nil
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "model.rank-00005-of-00008.safetensors") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("left behind: %v", entries)
	}
}

// TestShardedCheckpointLayout: a checkpoint of a 16-rank grid holds one
// weight and one moment file per (x, y, z) position, data replicas write
// none, its manifest maps each tensor to pieces that tile it, and a
// checkpoint of one rank is model.safetensors and optimizer.safetensors
// with whole tensors, an ordinary HF checkpoint.
func TestShardedCheckpointLayout(t *testing.T) {
	cfg := sweepConfig()
	weights := checkpoints.RandomWeights(cfg, 3)
	for _, shape := range []comm.Grid{{Data: 1, X: 1, Y: 1, Z: 1}, {Data: 2, X: 2, Y: 2, Z: 2}, {Data: 2, X: 1, Y: 1, Z: 1}} {
		dir := filepath.Join(t.TempDir(), "checkpoints")
		saveOnGrid(t, shape, cfg, weights, dir, SaveOptions{})
		path := filepath.Join(dir, StepName(1))
		man, err := VerifyCheckpoint(path)
		if err != nil {
			t.Fatal(err)
		}
		if *man.Grid != *gridOf(shape) || man.Version != 2 {
			t.Errorf("%v: manifest version %d grid %+v", shape, man.Version, man.Grid)
		}
		positions := shape.X * shape.Y * shape.Z
		var files []string
		for f := range man.Files {
			if strings.HasSuffix(f, ".safetensors") {
				files = append(files, f)
			}
		}
		if len(files) != 2*positions {
			t.Errorf("%v: %d safetensors files, want %d", shape, len(files), 2*positions)
		}
		if want := 3 * len(cfg.TensorSpecs()); len(man.Tensors) != want {
			t.Errorf("%v: %d tensors mapped, want %d", shape, len(man.Tensors), want)
		}
		ck, err := checkpoints.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(ck.Weights.Summary().Files); n != positions {
			t.Errorf("%v: the weights are in %d files, want %d", shape, n, positions)
		}
		got, err := ck.ReadAll()
		ck.Close()
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if !reflect.DeepEqual(got[i].Data, weights[i].Data) {
				t.Errorf("%v: %s reads back different", shape, got[i].Name)
			}
		}
		if positions == 1 {
			// An ordinary HF checkpoint: the plain reader sees whole tensors.
			f, err := checkpoints.OpenFile(filepath.Join(path, checkpoints.SafetensorsFile))
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range weights {
				v, err := f.ReadFloat32(w.Name)
				if err != nil || !reflect.DeepEqual(v, w.Data) {
					t.Errorf("%s: %v", w.Name, err)
				}
			}
			f.Close()
		}
	}
}

// TestShardedResumeSameGrid: on dp=2, x=2, y=2, z=2 a run stopped after 2
// steps and resumed on the same grid equals the uninterrupted run bit for
// bit: its metrics (timing aside) and every file of its last checkpoint
// but the trainer state's wall-clock-free record, which is equal too.
func TestShardedResumeSameGrid(t *testing.T) {
	model, dataset := sweepFolders(t)
	cfg := DefaultConfig()
	cfg.Model, cfg.Data = model, dataset
	cfg.BatchSize, cfg.MicroBatch, cfg.MaxSteps = 8, 4, 4
	cfg.EvalEvery, cfg.SaveEvery = 2, 2
	cfg.Schedule.LR = 1e-3
	shape := &comm.Grid{Data: 2, X: 2, Y: 2, Z: 2}
	whole := cfg
	whole.Out = filepath.Join(t.TempDir(), "whole")
	want := trainRun(t, whole, shape, "", 0)
	cfg.Out = filepath.Join(t.TempDir(), "resumed")
	got := append(trainRun(t, cfg, shape, "", 2), trainRun(t, cfg, shape, cfg.Out, 0)...)
	if len(got) != len(want) {
		t.Fatalf("%d metrics lines, want %d", len(got), len(want))
	}
	for i := range want {
		w, g := want[i], got[i]
		w.TokensPerS, w.ModelFLOPsPS, g.TokensPerS, g.ModelFLOPsPS, w.SaveBlockedS, g.SaveBlockedS = 0, 0, 0, 0, 0, 0
		w.CheckpointDir, g.CheckpointDir = filepath.Base(w.CheckpointDir), filepath.Base(g.CheckpointDir)
		if !reflect.DeepEqual(g, w) {
			t.Errorf("step %d: resumed %+v\nwhole %+v", w.Step, g, w)
		}
	}
	last := filepath.Join(CheckpointsDir, StepName(cfg.MaxSteps))
	man, err := VerifyCheckpoint(filepath.Join(whole.Out, last))
	if err != nil {
		t.Fatal(err)
	}
	for f := range man.Files {
		a, _ := os.ReadFile(filepath.Join(whole.Out, last, f))
		b, _ := os.ReadFile(filepath.Join(cfg.Out, last, f))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s: the resumed run's differs from the uninterrupted run's", f)
		}
	}
}

// TestResumeAcrossGrids: stopped on one grid and resumed on another (one
// rank ↔ 16 ranks among them), a run's metrics and final weights stay
// within 1e-5 relative of the uninterrupted one-rank run's.
func TestResumeAcrossGrids(t *testing.T) {
	if testing.Short() {
		t.Skip("16-rank grids")
	}
	model, dataset := sweepFolders(t)
	cfg := DefaultConfig()
	cfg.Model, cfg.Data = model, dataset
	cfg.BatchSize, cfg.MicroBatch, cfg.MaxSteps = 16, 16, 4
	cfg.EvalEvery, cfg.SaveEvery = 2, 2
	cfg.Schedule.LR = 1e-3
	one := cfg
	one.Out = filepath.Join(t.TempDir(), "one")
	want := trainRun(t, one, nil, "", 0)
	for _, pair := range [][2]*comm.Grid{
		{nil, {Data: 2, X: 2, Y: 2, Z: 2}},
		{{Data: 1, X: 4, Y: 2, Z: 2}, nil},
		{{Data: 4, X: 1, Y: 1, Z: 4}, {Data: 1, X: 2, Y: 4, Z: 2}},
	} {
		name := fmt.Sprintf("%v→%v", pair[0], pair[1])
		run := cfg
		run.Out = filepath.Join(t.TempDir(), "run")
		got := append(trainRun(t, run, pair[0], "", 2), trainRun(t, run, pair[1], run.Out, 0)...)
		if len(got) != len(want) {
			t.Fatalf("%s: %d metrics lines, want %d", name, len(got), len(want))
		}
		checkMetrics(t, name, got, want, map[string]float64{"loss": 1e-5, "grad_norm": 1e-5, "eval_loss": 1e-5})
		err := numtest.Each(checkpointTensors(t, got[len(got)-1].CheckpointDir), checkpointTensors(t, want[len(want)-1].CheckpointDir),
			func(g, w []float32) error { return numtest.CloseL2(g, w, 1e-5) })
		if err != nil {
			t.Errorf("%s: final weights, ‖ΔW‖/‖W‖: %v", name, err)
		}
	}
}

// TestExportOfGridCheckpoint: the same weights saved on 16 ranks and on
// one rank export (checkpoints.Export) to byte-identical HF checkpoints,
// split by a shard size into model-0000i-of-0000N files and an index;
// the plain safetensors reader loads them by HF name.
func TestExportOfGridCheckpoint(t *testing.T) {
	cfg := sweepConfig()
	weights := checkpoints.RandomWeights(cfg, 9)
	exports := map[string]string{}
	for _, shape := range []comm.Grid{{Data: 1, X: 1, Y: 1, Z: 1}, {Data: 2, X: 2, Y: 2, Z: 2}} {
		dir := filepath.Join(t.TempDir(), "checkpoints")
		saveOnGrid(t, shape, cfg, weights, dir, SaveOptions{Files: map[string][]byte{"tokenizer.json": []byte("{}")}})
		out := filepath.Join(t.TempDir(), "hf")
		if err := checkpoints.Export(filepath.Join(dir, StepName(1)), out, checkpoints.ExportOptions{DType: checkpoints.DTypeBF16, MaxShardBytes: 100 << 10}); err != nil {
			t.Fatal(err)
		}
		exports[shape.String()] = out
	}
	a, b := exports[comm.Grid{Data: 1, X: 1, Y: 1, Z: 1}.String()], exports[comm.Grid{Data: 2, X: 2, Y: 2, Z: 2}.String()]
	entries, err := os.ReadDir(a)
	if err != nil {
		t.Fatal(err)
	}
	shards := 0
	for _, e := range entries {
		x, _ := os.ReadFile(filepath.Join(a, e.Name()))
		y, err := os.ReadFile(filepath.Join(b, e.Name()))
		if err != nil || !bytes.Equal(x, y) {
			t.Errorf("%s: the grid checkpoint's export differs from the one-rank one's (%v)", e.Name(), err)
		}
		if strings.HasPrefix(e.Name(), "model-") {
			shards++
		}
	}
	if shards < 2 {
		t.Errorf("%d weight files, want a split export", shards)
	}
	set, err := checkpoints.OpenSet(b)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	for _, w := range weights {
		info, ok := set.Tensor(w.Name)
		if !ok || info.DType != checkpoints.DTypeBF16 || !reflect.DeepEqual(info.Shape, w.Shape) {
			t.Errorf("%s: %+v", w.Name, info)
		}
	}
}

// TestAsyncSave: with save_async, on one rank and on dp=2·x=2·y=2·z=2, a
// run's metrics (timing aside) and every file of its checkpoints equal
// the synchronous run's, stopped and resumed too, pruned to keep 2; the
// time the loop was blocked by saves is in the metrics.
func TestAsyncSave(t *testing.T) {
	model, dataset := sweepFolders(t)
	cfg := DefaultConfig()
	cfg.Model, cfg.Data = model, dataset
	cfg.BatchSize, cfg.MicroBatch, cfg.MaxSteps = 8, 4, 6
	cfg.EvalEvery, cfg.SaveEvery, cfg.Keep = 2, 1, 2
	cfg.Schedule.LR = 1e-3
	for _, shape := range []*comm.Grid{nil, {Data: 2, X: 2, Y: 2, Z: 2}} {
		sync := cfg
		sync.Out = filepath.Join(t.TempDir(), "sync")
		want := trainRun(t, sync, shape, "", 0)
		async := cfg
		async.SaveAsync = true
		async.Out = filepath.Join(t.TempDir(), "async")
		got := append(trainRun(t, async, shape, "", 3), trainRun(t, async, shape, async.Out, 0)...)
		if len(got) != len(want) {
			t.Fatalf("%v: %d metrics lines, want %d", shape, len(got), len(want))
		}
		blocked := 0.0
		for i := range want {
			w, g := want[i], got[i]
			blocked += g.SaveBlockedS
			w.TokensPerS, w.ModelFLOPsPS, g.TokensPerS, g.ModelFLOPsPS, w.SaveBlockedS, g.SaveBlockedS = 0, 0, 0, 0, 0, 0
			w.CheckpointDir, g.CheckpointDir = filepath.Base(w.CheckpointDir), filepath.Base(g.CheckpointDir)
			if !reflect.DeepEqual(g, w) {
				t.Errorf("%v: step %d: async %+v\nsync %+v", shape, w.Step, g, w)
			}
		}
		if !(blocked > 0) {
			t.Errorf("%v: no time blocked by saves reported", shape)
		}
		// Pruned to the newest two (on the grid, verified by all ranks).
		if entries, _ := os.ReadDir(filepath.Join(async.Out, CheckpointsDir)); len(entries) != 3 { // and latest
			t.Errorf("%v: %d entries in the checkpoints folder, want 2 checkpoints and latest", shape, len(entries))
		}
		for s := cfg.MaxSteps - 1; s <= cfg.MaxSteps; s++ {
			path := filepath.Join(CheckpointsDir, StepName(s))
			man, err := VerifyCheckpoint(filepath.Join(async.Out, path))
			if err != nil {
				t.Fatalf("%v: %v", shape, err)
			}
			for f := range man.Files {
				a, _ := os.ReadFile(filepath.Join(sync.Out, path, f))
				b, _ := os.ReadFile(filepath.Join(async.Out, path, f))
				if len(a) == 0 || !bytes.Equal(a, b) {
					t.Errorf("%v: step %d: %s differs from the synchronous run's", shape, s, f)
				}
			}
		}
		if left, _ := filepath.Glob(filepath.Join(async.Out, CheckpointsDir, ".tmp-*")); len(left) != 0 {
			t.Errorf("%v: left behind %v", shape, left)
		}
	}
}

// TestGridResumeVerifiesTogether: on a grid the ranks verify a
// checkpoint between them; a bit flipped in one rank's piece file makes
// every rank pass over it for the previous one (rank 0 warns, naming the
// file), and a damaged checkpoint named on purpose fails on every rank.
func TestGridResumeVerifiesTogether(t *testing.T) {
	model, dataset := sweepFolders(t)
	cfg := DefaultConfig()
	cfg.Model, cfg.Data = model, dataset
	cfg.BatchSize, cfg.MicroBatch, cfg.MaxSteps, cfg.SaveEvery, cfg.Keep = 8, 4, 4, 2, 0
	cfg.Out = filepath.Join(t.TempDir(), "run")
	shape := comm.Grid{Data: 1, X: 2, Y: 2, Z: 2}
	trainRun(t, cfg, &shape, "", 4)
	bad := filepath.Join(cfg.Out, CheckpointsDir, StepName(4))
	w, _ := shardFiles(6, 8)
	if err := flipBit(filepath.Join(bad, w), 4000); err != nil {
		t.Fatal(err)
	}
	for _, from := range []string{cfg.Out, bad} {
		var mu sync.Mutex
		steps, errs := map[int]int{}, map[string]int{}
		var warnings []string
		launch.Local(shape, parallel.Overlap{}, func(g *parallel.Grid) error {
			r, err := OpenParallel(cfg, cpu.New(cpu.Options{Threads: 1}), g, from)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[err.Error()]++
				return nil
			}
			defer r.Close()
			steps[r.Step]++
			if g.Rank() == 0 {
				warnings = r.Warnings
			}
			return nil
		})
		if from == cfg.Out {
			if steps[2] != shape.Size() || len(warnings) != 1 || !strings.Contains(warnings[0], StepName(4)+": "+w+": SHA-256") {
				t.Errorf("run folder: steps %v, errors %v, warnings %q", steps, errs, warnings)
			}
		} else if len(errs) != 1 || len(steps) != 0 {
			t.Errorf("damaged checkpoint: steps %v, errors %v", steps, errs)
		} else {
			for e := range errs {
				if !strings.Contains(e, w) || !strings.Contains(e, "SHA-256") {
					t.Errorf("damaged checkpoint: %s", e)
				}
			}
		}
	}
}

// saveOnGrid saves step 1 of a model holding weights, with fresh AdamW
// moments, into dir from every rank of shape (one rank: no grid).
func saveOnGrid(t *testing.T, shape comm.Grid, cfg *checkpoints.Config, weights []checkpoints.Tensor, dir string, opt SaveOptions) {
	t.Helper()
	save := func(g *parallel.Grid) error {
		m, o, free, err := rankModel(cfg, weights, g, testAdamW)
		if err != nil {
			return err
		}
		defer free()
		return SaveCheckpoint(dir, StepName(1), m, o, TrainerState{Step: 1}, opt)
	}
	var err error
	if shape.Size() == 1 {
		err = save(nil)
	} else {
		err = launch.Local(shape, parallel.Overlap{}, save)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// testAdamW is the tests' AdamW.
var testAdamW = OptimizerConfig{Name: "adamw", Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}

// rankModel is one rank's model of cfg holding weights, with a fresh
// optimizer, on a one-thread CPU backend; free releases both.
func rankModel(cfg *checkpoints.Config, weights []checkpoints.Tensor, g *parallel.Grid, oc OptimizerConfig) (m *llama.Model, o *Optimizer, free func(), err error) {
	b := cpu.New(cpu.Options{Threads: 1})
	if m, err = llama.New(b, cfg, llama.Options{Parallel: g}); err != nil {
		return nil, nil, nil, err
	}
	if err = m.SetWeights(weights); err == nil {
		o, err = NewOptimizer(b, m.Params(), oc)
	}
	if err != nil {
		m.Free()
		return nil, nil, nil, err
	}
	return m, o, func() { o.Free(); m.Free() }, nil
}
