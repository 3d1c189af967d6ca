package finetune

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/parallel"
)

// TestSaveTimes measures, for the small preset (23M parameters, AdamW)
// on one rank and on 8 in-process ranks (x=2, y=2, z=2), a synchronous
// save's time and an asynchronous one's: the time the step loop is
// blocked (the folder, the host snapshot) and the time until it is
// committed. MEMTRAIN_SAVE_TIMES=1 runs it; it asserts nothing.
func TestSaveTimes(t *testing.T) {
	if os.Getenv("MEMTRAIN_SAVE_TIMES") == "" {
		t.Skip("set MEMTRAIN_SAVE_TIMES=1 to measure")
	}
	preset, err := checkpoints.LookupPreset("small")
	if err != nil {
		t.Fatal(err)
	}
	cfg := preset.Config()
	weights := checkpoints.RandomWeights(cfg, 1)
	for _, shape := range []comm.Grid{{Data: 1, X: 1, Y: 1, Z: 1}, {Data: 1, X: 2, Y: 2, Z: 2}} {
		const reps = 5
		var sync, blocked, total time.Duration
		dir := filepath.Join(t.TempDir(), "checkpoints")
		run := func(g *parallel.Grid) error {
			m, o, free, err := rankModel(cfg, weights, g, testAdamW)
			if err != nil {
				return err
			}
			defer free()
			lead := g == nil || g.Rank() == 0
			var snap snapshot
			for i := range reps {
				start := time.Now()
				if err := SaveCheckpoint(dir, StepName(2*i+1), m, o, TrainerState{Step: 2*i + 1}, SaveOptions{Keep: 1}); err != nil {
					return err
				}
				if lead {
					sync += time.Since(start)
				}
				start = time.Now()
				sv, err := beginSave(dir, StepName(2*i+2), m, o, TrainerState{Step: 2*i + 2}, SaveOptions{Keep: 1})
				if err != nil {
					return err
				}
				snap.take(m, o)
				if lead {
					blocked += time.Since(start)
				}
				done := make(chan struct{})
				go func() { sv.sums, sv.err = sv.write(snap.source()); close(done) }()
				<-done
				if err := sv.finish(); err != nil {
					return err
				}
				if lead {
					total += time.Since(start)
				}
			}
			return nil
		}
		if shape.Size() == 1 {
			err = run(nil)
		} else {
			err = launch.Local(shape, parallel.Overlap{}, run)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("small (%d parameters, %.0f MB with moments) on %v: synchronous save %v; asynchronous: step loop blocked %v, committed after %v (mean of %d)",
			cfg.Params().Total, float64(12*cfg.Params().Total)/1e6, shape, sync/reps, blocked/reps, total/reps, reps)
	}
}
