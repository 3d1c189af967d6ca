package finetune

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/internal/stats"
)

// repeat is n copies of x.
func repeat(x float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = x
	}
	return out
}

func TestDivergenceWatch(t *testing.T) {
	def := Divergence{Factor: 4, Margin: 1, Window: 50}
	towardsZero := make([]float64, 300)
	for i := range towardsZero {
		towardsZero[i] = 3 * math.Pow(0.97, float64(i))
		if i%7 == 0 {
			towardsZero[i] += 0.9 // spikes of many times the median, but under 1 nat
		}
	}
	for _, tc := range []struct {
		name     string
		cfg      Divergence
		losses   []float64
		stop     int // the step that stops the run (0: none)
		leftBand int // the step the loss left its band on, at the stop
	}{
		{"steady", def, repeat(2, 100), 0, 0},
		{"decreasing towards 0 with spikes", def, towardsZero, 0, 0},
		{"near 0, a spike under the margin", def, append(repeat(1e-4, 20), 0.99, 1e-4), 0, 0},
		{"a spike", def, append(repeat(2, 10), 9), 11, 11},
		{"just at the threshold", def, append(repeat(2, 10), 8), 0, 0},
		{"a gradual rise", def, append(repeat(2, 10), 2.5, 3.5, 5, 7, 9), 15, 12},
		{"back in band, then a spike", def, append(repeat(2, 10), 3.5, 2.1, 2, 9), 14, 14},
		{"not finite losses are not counted", def, append(repeat(2, 5), math.NaN(), math.Inf(1), 9), 8, 8},
		{"the first loss is not judged", def, []float64{100, 1, 1}, 0, 0},
		{"off", Divergence{}, append(repeat(2, 10), 1e6), 0, 0},
		{"factor 2", Divergence{Factor: 2, Margin: 1, Window: 50}, append(repeat(2, 10), 5), 11, 11},
		// The median of the last 3 steps is 1; of all, 5.5.
		{"window 3", Divergence{Factor: 4, Margin: 1, Window: 3}, []float64{10, 10, 10, 1, 1, 1, 5}, 7, 7},
		{"window 50", def, []float64{10, 10, 10, 1, 1, 1, 5}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := divergence{cfg: tc.cfg}
			stop := 0
			var err error
			for i, l := range tc.losses {
				if err = d.observe(i+1, l); err != nil {
					stop = i + 1
					break
				}
			}
			if stop != tc.stop {
				t.Fatalf("stopped at step %d (%v), want %d", stop, err, tc.stop)
			}
			if stop == 0 {
				return
			}
			if d.leftBand != tc.leftBand {
				t.Errorf("left the band at step %d, want %d", d.leftBand, tc.leftBand)
			}
			want := fmt.Sprintf("finetune: step %d: loss %.4g diverged: over %g×", stop, tc.losses[stop-1], tc.cfg.Factor)
			if !errors.Is(err, ErrDiverged) || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("error %q, want %q… wrapping ErrDiverged", err, want)
			}
			if since := fmt.Sprintf("out of band since step %d", tc.leftBand); (tc.leftBand < stop) != strings.Contains(err.Error(), since) {
				t.Errorf("error %q: mention of %q", err, since)
			}
		})
	}
}

// TestDivergenceWindowBounded: the watch holds no more than its window.
func TestDivergenceWindowBounded(t *testing.T) {
	d := divergence{cfg: Divergence{Factor: 4, Margin: 1, Window: 5}}
	for i := range 100 {
		d.observe(i+1, float64(i%3))
	}
	if len(d.losses) != 5 || d.losses[4] != float64(99%3) {
		t.Errorf("window %v", d.losses)
	}
}

// TestStoppedNamesLastGood: the last good checkpoint is the newest saved
// before the loss left its band.
func TestStoppedNamesLastGood(t *testing.T) {
	saved := []savedCheckpoint{{2, "c/step-2"}, {4, "c/step-4"}, {6, "c/step-6"}}
	for _, tc := range []struct {
		name     string
		saved    []savedCheckpoint
		leftBand int
		want     string
	}{
		{"in band", saved, 0, "c/step-6"},
		{"left after the newest", saved, 7, "c/step-6"},
		{"left at a save", saved, 6, "c/step-4"},
		{"left after an older save", saved, 3, "c/step-2"},
		{"left before every save", saved, 2, "none saved before step 2, where the loss left its band"},
		{"nothing saved", nil, 0, "none saved by this run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Run{saved: tc.saved, watch: divergence{leftBand: tc.leftBand}}
			err := r.stopped(ErrNonFinite)
			if want := ErrNonFinite.Error() + "; stopped, last good checkpoint: " + tc.want; err.Error() != want || !errors.Is(err, ErrNonFinite) {
				t.Errorf("%q, want %q", err, want)
			}
		})
	}
}

// TestRunStopsOnDivergence: a run whose loss rises (a learning rate far
// too high, warmed up over 10 steps) stops with an error naming the step
// and loss the watch judges diverged, and names as last good the newest
// checkpoint saved before the loss left its band, which pruning (keep 1)
// kept although newer ones were saved.
func TestRunStopsOnDivergence(t *testing.T) {
	model, dataset := sweepFolders(t)
	cfg := DefaultConfig()
	cfg.Model, cfg.Data = model, dataset
	cfg.BatchSize, cfg.MicroBatch, cfg.MaxSteps, cfg.SaveEvery, cfg.Keep, cfg.Clip = 4, 4, 24, 1, 1, 0
	cfg.Schedule = Schedule{Kind: "constant", LR: 1, Warmup: 10}
	cfg.Divergence = Divergence{Factor: 2, Margin: 1, Window: 50}

	// The losses without the watch, and where it must stop and why, from
	// the rule itself.
	free := cfg
	free.Divergence.Factor = 0
	free.Out = filepath.Join(t.TempDir(), "free")
	var losses []float64
	for _, m := range trainRun(t, free, nil, "", 0) {
		losses = append(losses, m.Loss)
	}
	stop, left := 0, 0
	for i := 1; i < len(losses) && stop == 0; i++ {
		med := stats.Median(losses[max(0, i-cfg.Divergence.Window):i])
		if losses[i] <= med+cfg.Divergence.Margin {
			left = 0
		} else if left == 0 {
			left = i + 1
		}
		if losses[i] > cfg.Divergence.Factor*med && losses[i] > med+cfg.Divergence.Margin {
			stop = i + 1
		}
	}
	if stop == 0 || left >= stop || left < 2 {
		t.Fatalf("the fixture no longer diverges gradually (stop at step %d, out of band from %d): losses %.3g", stop, left, losses)
	}

	t.Logf("losses %.3g: out of band from step %d, stop at %d", losses, left, stop)

	// Uninterrupted, and stopped once the loss is out of band and resumed:
	// the watch's state (losses, where the loss left its band, the last
	// good checkpoint) travels in trainer_state.json.
	for _, stopAfter := range []int{0, left} {
		t.Run(fmt.Sprintf("stop after %d", stopAfter), func(t *testing.T) {
			cfg.Out = filepath.Join(t.TempDir(), "watched")
			train := func(resume string, stopAfter int) error {
				r, err := Open(cfg, cpu.New(cpu.Options{Threads: 1}), resume)
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				r.StopAfter = stopAfter
				return r.Train(&bytes.Buffer{}, nil)
			}
			var err error
			if stopAfter > 0 {
				if err := train("", stopAfter); err != nil {
					t.Fatal(err)
				}
				err = train(cfg.Out, 0)
			} else {
				err = train("", 0)
			}
			good := filepath.Join(cfg.Out, "checkpoints", StepName(left-1))
			want := fmt.Sprintf("finetune: step %d: loss %.4g diverged: ", stop, losses[stop-1])
			if !errors.Is(err, ErrDiverged) || !strings.HasPrefix(err.Error(), want) || !strings.HasSuffix(err.Error(), "; stopped, last good checkpoint: "+good) {
				t.Fatalf("error %v; want %q… naming %s", err, want, good)
			}
			if _, err := VerifyCheckpoint(good); err != nil {
				t.Errorf("the last good checkpoint: %v", err)
			}
			// The newest checkpoint, of the step before the stop, is kept too.
			if _, err := os.Stat(filepath.Join(cfg.Out, "checkpoints", StepName(stop-1))); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestMemorizationRunDoesNotFalseAlarm: a memorization run whose loss
// falls towards 0, with spikes of many times its median, trains to the
// end under the default watch; without the margin it would stop.
func TestMemorizationRunDoesNotFalseAlarm(t *testing.T) {
	model, dataset := sweepFolders(t)
	cfg := DefaultConfig()
	cfg.Model, cfg.Data = model, dataset
	cfg.BatchSize, cfg.MicroBatch, cfg.MaxSteps = 8, 8, 150
	cfg.Schedule = Schedule{Kind: "constant", LR: 1e-2}
	for _, tc := range []struct {
		margin float64
		stops  bool
	}{{1, false}, {0, true}} {
		cfg.Divergence.Margin = tc.margin
		cfg.Out = filepath.Join(t.TempDir(), "run")
		r, err := Open(cfg, cpu.New(cpu.Options{Threads: 1}), "")
		if err != nil {
			t.Fatal(err)
		}
		var last Metrics
		err = r.Train(&bytes.Buffer{}, func(m Metrics) { last = m })
		r.Close()
		if tc.stops != errors.Is(err, ErrDiverged) || !tc.stops && err != nil {
			t.Errorf("margin %g: %v", tc.margin, err)
		}
		if !tc.stops && (last.Step != cfg.MaxSteps || !(last.Loss <= 0.3)) {
			t.Errorf("margin %g: the run ended at step %d with loss %.3g; the fixture should memorize", tc.margin, last.Step, last.Loss)
		}
	}
}
