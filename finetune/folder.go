package finetune

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/internal/atomicfile"
)

// The files of a run folder besides its checkpoints.
const (
	ConfigFile  = "config.yaml"   // the effective configuration
	MetricsFile = "metrics.jsonl" // one Metrics line a step
)

// OpenFolder prepares the run's folder, Config.Out, for training from
// the run's current step: it writes the effective configuration, drops
// the metrics lines of steps after the current one (a run stopped after
// its last checkpoint redoes them), and opens the metrics file for
// appending. It is the one writer of a run folder (the CLI's finetune
// and the experiment runner both call it); on a grid only the rank that
// writes (rank 0) calls it.
func (r *Run) OpenFolder() (*os.File, error) {
	out := r.Config.Out
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("finetune: %w", err)
	}
	eff, err := yaml.Marshal(r.Config)
	if err != nil {
		return nil, fmt.Errorf("finetune: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(out, ConfigFile), eff); err != nil {
		return nil, err
	}
	path := filepath.Join(out, MetricsFile)
	if err := trimMetrics(path, r.Step); err != nil {
		return nil, err
	}
	mf, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("finetune: %w", err)
	}
	return mf, nil
}

// trimMetrics drops metrics lines of steps after step, and a torn last
// line.
func trimMetrics(path string, step int) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("finetune: %w", err)
	}
	var keep bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var m struct{ Step int }
		if json.Unmarshal(sc.Bytes(), &m) != nil || m.Step > step {
			break // a torn last line, or the redone steps
		}
		keep.Write(sc.Bytes())
		keep.WriteByte('\n')
	}
	if keep.Len() == len(b) {
		return nil
	}
	return atomicfile.WriteFile(path, keep.Bytes())
}

// Hooks are what a caller of TrainRank sees of the run and sets on it.
type Hooks struct {
	Resume    string // a run folder or checkpoint to continue ("": start)
	StopAfter int    // Run.StopAfter
	// BeforeCommit is Run.BeforeCommit (crash-safety tests).
	BeforeCommit func(step int, tmpDir string)
	// Started and Progress are called on the writing rank only: once the
	// run is open and its folder ready, and after every step.
	Started  func(*Run)
	Progress func(Metrics)
}

// TrainRank is one rank's part of a fine-tuning run on grid g (nil: the
// only rank), on backend b: it opens the run, the writing rank (rank 0)
// opens the run folder (OpenFolder), every rank learns whether all
// started (so that none waits for one that failed), and all train to the
// end. It returns the last step's metrics (zero when nothing was left to
// train).
func TrainRank(cfg Config, b engine.Backend, g *parallel.Grid, h Hooks) (Metrics, error) {
	lead := g == nil || g.Rank() == 0
	run, err := OpenParallel(cfg, b, g, h.Resume)
	var mf *os.File
	if err == nil && lead {
		mf, err = run.OpenFolder()
	}
	if g != nil {
		err = g.Agree(b, err)
	}
	if err != nil {
		if run != nil {
			run.Close()
		}
		if mf != nil {
			mf.Close()
		}
		return Metrics{}, err
	}
	defer run.Close()
	run.StopAfter, run.BeforeCommit = h.StopAfter, h.BeforeCommit
	var w io.Writer = io.Discard
	var progress func(Metrics)
	if lead {
		defer mf.Close()
		w = mf
		if h.Started != nil {
			h.Started(run)
		}
		progress = h.Progress
	}
	var last Metrics
	err = run.Train(w, func(m Metrics) {
		last = m
		if progress != nil {
			progress(m)
		}
	})
	if err != nil {
		return last, err
	}
	if lead {
		if err := mf.Sync(); err != nil {
			return last, fmt.Errorf("finetune: %w", err)
		}
	}
	return last, nil
}
