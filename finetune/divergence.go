package finetune

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"

	"github.com/memtrain/memtrain/internal/stats"
)

// ErrDiverged reports a finite loss far above its running median
// (Config.Divergence). The step that met it was taken; its weights are not
// saved.
var ErrDiverged = errors.New("diverged")

// divergence watches a run's losses for a divergence (see Divergence) and
// tracks where one began: the loss leaves its band when it is more than
// margin above the running median, and is back when it is not. Weights
// from the step the loss left the band on are suspect, so a checkpoint
// saved at or after it is not good, however far the loss had yet to rise
// to stop the run.
type divergence struct {
	cfg      Divergence
	losses   []float64 // the last cfg.Window losses, oldest first
	leftBand int       // the step the loss left its band on; 0 while in band
}

// observe judges step's loss against the losses of the steps before it,
// then adds it to them. It returns an error wrapping ErrDiverged for a
// divergence. A loss that is not finite (a batch with nothing to learn
// from gives NaN) is not judged or counted; the first loss has nothing
// to be judged against.
func (d *divergence) observe(step int, loss float64) error {
	if d.cfg.Factor == 0 || math.IsNaN(loss) || math.IsInf(loss, 0) {
		return nil
	}
	if len(d.losses) > 0 {
		med := stats.Median(d.losses)
		if loss <= med+d.cfg.Margin {
			d.leftBand = 0
		} else if d.leftBand == 0 {
			d.leftBand = step
		}
		if loss > d.cfg.Factor*med && loss > med+d.cfg.Margin {
			since := ""
			if d.leftBand < step {
				since = fmt.Sprintf("; out of band since step %d", d.leftBand)
			}
			return fmt.Errorf("finetune: step %d: loss %.4g %w: over %g× the median %.4g of the last %d steps and more than %g above it%s",
				step, loss, ErrDiverged, d.cfg.Factor, med, len(d.losses), d.cfg.Margin, since)
		}
	}
	if len(d.losses) == d.cfg.Window {
		d.losses = append(d.losses[:0], d.losses[1:]...)
	}
	d.losses = append(d.losses, loss)
	return nil
}

// DivergenceState is the divergence watch's state in trainer_state.json,
// so that a resumed run judges its losses as the uninterrupted run would,
// and still knows its last good checkpoint when the loss was out of band
// at the save.
type DivergenceState struct {
	Losses   []float64 `json:"losses"`              // the last window steps' losses, oldest first
	LeftBand int       `json:"left_band,omitempty"` // the step the loss left its band on (0: in band)
	LastGood string    `json:"last_good,omitempty"` // while out of band: the newest checkpoint saved before LeftBand
}

// savedCheckpoint is a checkpoint a run saved, or resumed from.
type savedCheckpoint struct {
	step int
	path string
}

// lastGood returns the newest checkpoint the run saved (or resumed from)
// before its loss left its band, if any.
func (r *Run) lastGood() (string, bool) {
	for i := len(r.saved) - 1; i >= 0; i-- {
		if s := r.saved[i]; r.watch.leftBand == 0 || s.step < r.watch.leftBand {
			return s.path, true
		}
	}
	return "", false
}

// stopped is the error that ends a run on err, a non-finite loss or a
// divergence, naming the last good checkpoint.
func (r *Run) stopped(err error) error {
	good, ok := r.lastGood()
	switch {
	case ok:
	case r.watch.leftBand > 0 && len(r.saved) > 0:
		good = fmt.Sprintf("none saved before step %d, where the loss left its band", r.watch.leftBand)
	default:
		good = "none saved by this run"
	}
	return fmt.Errorf("%w; stopped, last good checkpoint: %s", err, good)
}

// divergenceState is the watch's state to save with the checkpoint of the
// current step.
func (r *Run) divergenceState() *DivergenceState {
	if r.watch.cfg.Factor == 0 {
		return nil
	}
	s := &DivergenceState{Losses: append([]float64{}, r.watch.losses...), LeftBand: r.watch.leftBand}
	if s.LeftBand > 0 {
		s.LastGood, _ = r.lastGood()
	}
	return s
}

// protected is the checkpoint of the folder dir that pruning must keep
// while the loss is out of band — the last good one, which the newest
// checkpoints no longer are — or "".
func (r *Run) protected(dir string) string {
	if r.watch.leftBand == 0 {
		return ""
	}
	if good, ok := r.lastGood(); ok && filepath.Dir(good) == dir {
		return filepath.Base(good)
	}
	return ""
}

// restoreDivergence takes the watch's state from the checkpoint at path,
// of step; the losses beyond the window, if it shrank, are dropped.
func (r *Run) restoreDivergence(s *DivergenceState, step int, path string) {
	if s != nil {
		r.watch.losses = append(r.watch.losses[:0], s.Losses[max(0, len(s.Losses)-r.watch.cfg.Window):]...)
		r.watch.leftBand = s.LeftBand
		if s.LeftBand > 0 && s.LastGood != "" {
			// Saved before LeftBand; its step itself is not needed.
			r.saved = append(r.saved, savedCheckpoint{step: s.LeftBand - 1, path: s.LastGood})
		}
	}
	r.saved = append(r.saved, savedCheckpoint{step: step, path: path})
}
