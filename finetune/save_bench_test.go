package finetune

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/parallel"
)

// BenchmarkSave measures, for the small preset (23M parameters, AdamW)
// on one rank and on 8 in-process ranks (x=2, y=2, z=2), a synchronous
// save's time (sync-s/op) and an asynchronous one's: the time the step
// loop is blocked (the folder, the host snapshot: blocked-s/op) and the
// time until it is committed (committed-s/op). An operation is one save
// of each kind, timed on rank 0; the model's setup is not counted.
//
//	go test ./finetune/ -run '^$' -bench BenchmarkSave -benchtime 5x
func BenchmarkSave(b *testing.B) {
	preset, err := checkpoints.LookupPreset("small")
	if err != nil {
		b.Fatal(err)
	}
	cfg := preset.Config()
	weights := checkpoints.RandomWeights(cfg, 1)
	b.Logf("small: %d parameters, %.0f MB with moments", cfg.Params().Total, float64(12*cfg.Params().Total)/1e6)
	for _, c := range []struct {
		name  string
		shape comm.Grid
	}{{"one-rank", comm.Grid{Data: 1, X: 1, Y: 1, Z: 1}}, {"x2y2z2", comm.Grid{Data: 1, X: 2, Y: 2, Z: 2}}} {
		b.Run(c.name, func(b *testing.B) {
			var sync, blocked, total time.Duration
			dir := filepath.Join(b.TempDir(), "checkpoints")
			n := b.N
			run := func(g *parallel.Grid) error {
				m, o, free, err := rankModel(cfg, weights, g, testAdamW)
				if err != nil {
					return err
				}
				defer free()
				lead := g == nil || g.Rank() == 0
				var snap snapshot
				for i := range n {
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
			var err error
			if c.shape.Size() == 1 {
				err = run(nil)
			} else {
				err = launch.Local(c.shape, parallel.Overlap{}, run)
			}
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(sync.Seconds()/float64(n), "sync-s/op")
			b.ReportMetric(blocked.Seconds()/float64(n), "blocked-s/op")
			b.ReportMetric(total.Seconds()/float64(n), "committed-s/op")
			b.ReportMetric(0, "ns/op") // the setup's time too: the three above are the measure
		})
	}
}
