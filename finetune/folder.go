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
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/internal/atomicfile"
)

// The files of a run folder besides its checkpoints.
const (
	ConfigFile  = "config.yaml"   // the effective configuration
	MetricsFile = "metrics.jsonl" // one Metrics line a step
	// FinalDir is the HF checkpoint of a finished run's final weights, in
	// save_dtype, exported from its last checkpoint (checkpoints.Export).
	FinalDir = "final"
)

// OpenFolder prepares the run's folder, Config.Out, for training from
// the run's current step: it records the start in the run's history
// (HistoryFile: the settings changed since the last start), writes the
// effective configuration with its paths absolute, recovers the metrics
// line by line up to the current step (recoverMetrics: a run stopped
// after its last checkpoint redoes the later steps), and opens the
// metrics file for appending. Warnings go to r.Warnings. It is the one writer of a run folder (the CLI's finetune
// and the experiment runner both call it); on a grid only the rank that
// writes (rank 0) calls it.
func (r *Run) OpenFolder() (*os.File, error) {
	out := r.Config.Out
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("finetune: %w", err)
	}
	rec := r.Config.withAbsolutePaths()
	if r.legacyIdentity {
		// Its checkpoints' digest covers the paths as written.
		rec = r.Config
	}
	warn, err := recordHistory(out, r.Step, previousConfig(out), &rec)
	if err != nil {
		return nil, err
	}
	if warn != "" {
		r.Warnings = append(r.Warnings, warn)
	}
	eff, err := yaml.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("finetune: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(out, ConfigFile), eff); err != nil {
		return nil, err
	}
	path := filepath.Join(out, MetricsFile)
	warnings, err := recoverMetrics(path, r.Step)
	if err != nil {
		return nil, err
	}
	r.Warnings = append(r.Warnings, warnings...)
	mf, err := openNoFollow(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("finetune: %w", err)
	}
	return mf, nil
}

// DroppedMetricsFile keeps the lines recoverMetrics could not read, so
// that a garbled metrics file loses nothing.
const DroppedMetricsFile = MetricsFile + ".dropped"

// recoverMetrics keeps, line by line, the metrics of the steps up to step:
// a line that is not a metrics line (garbled, or torn by a kill
// mid-write), and the lines of later steps (redone from the checkpoint),
// are dropped and appended to DroppedMetricsFile, so that no line is
// lost; the valid lines after a bad one are kept. Each thing
// it drops or finds missing is a warning: the lines it dropped, and the
// steps up to step that no line logs.
func recoverMetrics(path string, step int) (warnings []string, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("finetune: %w", err)
	}
	var keep, dropped bytes.Buffer
	var bad []string
	var later []int
	logged := map[int]bool{}
	lines := bytes.SplitAfter(b, []byte("\n"))
	for n, line := range lines {
		text := bytes.TrimRight(line, "\r\n")
		if len(bytes.TrimSpace(text)) == 0 {
			continue
		}
		var m struct {
			Step *int `json:"step"`
		}
		if json.Unmarshal(text, &m) != nil || m.Step == nil || *m.Step < 1 {
			what := "garbled"
			if n == len(lines)-1 && !bytes.HasSuffix(line, []byte("\n")) {
				what = "torn"
			}
			bad = append(bad, fmt.Sprintf("line %d (%s)", n+1, what))
			dropped.Write(text)
			dropped.WriteByte('\n')
			continue
		}
		if *m.Step > step {
			later = append(later, *m.Step)
			dropped.Write(text)
			dropped.WriteByte('\n')
			continue
		}
		logged[*m.Step] = true
		keep.Write(text)
		keep.WriteByte('\n')
	}
	if len(bad) > 0 {
		warnings = append(warnings, fmt.Sprintf("finetune: %s: %s not a metrics line: dropped, kept in %s", path, strings.Join(bad, ", "), DroppedMetricsFile))
	}
	if dropped.Len() > 0 {
		df, err := openNoFollow(filepath.Join(filepath.Dir(path), DroppedMetricsFile), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, fmt.Errorf("finetune: %w", err)
		}
		_, err = df.Write(dropped.Bytes())
		if cerr := df.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("finetune: %w", err)
		}
	}
	if len(later) > 0 {
		from := fmt.Sprintf("the checkpoint of step %d", step)
		if step == 0 {
			from = "the start"
		}
		warnings = append(warnings, fmt.Sprintf("finetune: %s: dropped the metrics of %s, redone from %s (kept in %s)", path, stepRanges(later), from, DroppedMetricsFile))
	}
	var missing []int
	if len(logged) > 0 {
		for s := 1; s <= step; s++ {
			if !logged[s] {
				missing = append(missing, s)
			}
		}
	}
	if len(missing) > 0 {
		warnings = append(warnings, fmt.Sprintf("finetune: %s: no metrics line for %s", path, stepRanges(missing)))
	}
	if keep.Len() == len(b) {
		return warnings, nil
	}
	return warnings, atomicfile.WriteFile(path, keep.Bytes())
}

// stepRanges writes sorted steps as "step 3" or "steps 3–5, 9".
func stepRanges(steps []int) string {
	steps = slices.Clone(steps)
	slices.Sort(steps)
	steps = slices.Compact(steps)
	var parts []string
	for i := 0; i < len(steps); {
		j := i
		for j+1 < len(steps) && steps[j+1] == steps[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(steps[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d–%d", steps[i], steps[j]))
		}
		i = j + 1
	}
	if len(steps) == 1 {
		return "step " + parts[0]
	}
	return "steps " + strings.Join(parts, ", ")
}

// RunFolder is the run folder of a resume path: the path itself, or the
// run that holds it when it is one of the run's checkpoints.
func RunFolder(resume string) string {
	if _, err := os.Stat(filepath.Join(resume, StateFile)); err == nil {
		return filepath.Dir(filepath.Dir(filepath.Clean(resume)))
	}
	return resume
}

// An ExistingRunError says that a run folder already holds a run, which
// a new run would overwrite: it is continued by resuming, or replaced on
// request (Hooks.Replace).
type ExistingRunError struct {
	Dir  string
	Step int     // the last step it logged (0: none)
	Loss float64 // that step's loss
	// Checkpoint is its newest complete checkpoint ("" when none).
	Checkpoint string
}

func (e *ExistingRunError) Error() string {
	return fmt.Sprintf("finetune: %s holds a run%s: continue it, or replace it", e.Dir, e.Describe())
}

// Describe is " (step N, loss L, checkpoint C)": what the folder holds,
// as far as it is known ("" when nothing is).
func (e *ExistingRunError) Describe() string {
	var parts []string
	if e.Step > 0 {
		parts = append(parts, fmt.Sprintf("step %d, loss %.4f", e.Step, e.Loss))
	}
	if e.Checkpoint != "" {
		parts = append(parts, "checkpoint "+e.Checkpoint)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// existingRun returns the run that folder dir holds, or nil.
func existingRun(dir string) *ExistingRunError {
	e := &ExistingRunError{Dir: dir}
	found := false
	if ck, err := LatestCheckpoint(filepath.Join(dir, "checkpoints")); err == nil {
		e.Checkpoint, found = ck, true
	}
	if _, err := os.Stat(filepath.Join(dir, ConfigFile)); err == nil {
		found = true
	}
	if b, err := os.ReadFile(filepath.Join(dir, MetricsFile)); err == nil && len(bytes.TrimSpace(b)) > 0 {
		found = true
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 1<<20), 1<<26)
		for sc.Scan() {
			var m struct {
				Step int
				Loss float64
			}
			if json.Unmarshal(sc.Bytes(), &m) == nil && m.Step > 0 {
				e.Step, e.Loss = m.Step, m.Loss
			}
		}
	}
	if !found {
		return nil
	}
	return e
}

// replaceRun removes the run that folder dir holds: its checkpoints,
// metrics and configuration (other files are the user's). Only a run
// folder's names are removed, and only in a run folder (isRunFolder).
func replaceRun(dir string) error {
	if !isRunFolder(dir) {
		names, err := foreignNames(dir)
		if err != nil {
			return err
		}
		return &ForeignFilesError{Dir: dir, Names: names}
	}
	for _, name := range runNames() {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("finetune: replacing the run in %s: %w", dir, err)
		}
	}
	return nil
}

// prepareFolder readies run folder dir, which the caller has locked, for
// a run that continues the one it holds (cont) or a new one: a run it
// holds is then an *ExistingRunError unless replace removes it. Either
// way the folder becomes (or stays) a run folder; one holding a run's
// names that no run wrote is a *ForeignFilesError, and nothing in it
// changes.
func prepareFolder(dir string, cont, replace bool) error {
	if !cont {
		if e := existingRun(dir); e != nil && !replace {
			return e
		} else if e != nil {
			if err := replaceRun(dir); err != nil {
				return err
			}
		}
	}
	return claimRunFolder(dir)
}

// Hooks are what a caller of TrainRank sees of the run and sets on it.
type Hooks struct {
	Resume string // a run folder or checkpoint to continue ("": start)
	// Replace starts over in a folder that holds a run, removing its
	// checkpoints, metrics and configuration; without it (and without
	// Resume) such a folder is an *ExistingRunError.
	Replace   bool
	StopAfter int // Run.StopAfter
	// Stop is Run.Stop: polled after every step (a signal handler's).
	Stop func() bool
	// BeforeCommit is Run.BeforeCommit (crash-safety tests).
	BeforeCommit func(step int, tmpDir string)
	// Started and Progress are called on the writing rank only: once the
	// run is open and its folder ready, and after every step.
	Started  func(*Run)
	Progress func(Metrics)
}

// A Result is how TrainRank's run ended.
type Result struct {
	Last    Metrics // the last step's metrics (zero when no step ran)
	Step    int     // steps done
	Steps   int     // the run's length
	Done    bool    // nothing was left to train when it opened
	Stopped bool    // stopped early (Hooks.Stop or StopAfter), with a checkpoint at Step
}

// TrainRank is one rank's part of a fine-tuning run on grid g (nil: the
// only rank, the grid of one rank), on backend b: the writing rank (rank 0) locks the run
// folder (Lock) and checks it (a folder holding a run is continued with
// Hooks.Resume or replaced with Hooks.Replace, never overwritten), every
// rank opens the run, the writing rank opens the folder (OpenFolder),
// every rank learns whether all started (so that none waits for one that
// failed), and all train to the end or to a stop.
func TrainRank(cfg Config, b engine.Backend, g *parallel.Grid, h Hooks) (Result, error) {
	g = parallel.OrOne(g, b)
	lead := g.Rank() == 0
	restart := ""
	if h.Resume != "" && RunFolder(h.Resume) == h.Resume {
		if _, _, cerr := resumeCandidates(filepath.Join(h.Resume, CheckpointsDir)); cerr != nil {
			if e := existingRun(h.Resume); e != nil {
				// A run stopped before its first checkpoint has nothing to
				// continue from: it starts over in place. Nothing is
				// removed first: config.yaml is rewritten whole and the
				// metrics trimmed (OpenFolder), so a kill at any point
				// leaves the run's command line and lines.
				h.Resume = ""
				restart = fmt.Sprintf("finetune: %s has no checkpoint to continue from (%v): starting over from step 1", e.Dir, cerr)
			}
		}
	}
	var err error
	if lead {
		var unlock func()
		if unlock, err = Lock(cfg.Out); err == nil {
			defer unlock()
			err = prepareFolder(cfg.Out, h.Resume != "" || restart != "", h.Replace)
		}
	}
	err = g.Agree(b, err)
	if err == nil {
		err = checkShared(cfg.Out, b, g)
	}
	if err != nil {
		return Result{}, err
	}
	run, err := OpenParallel(cfg, b, g, h.Resume)
	var mf *os.File
	if err == nil && lead {
		mf, err = run.OpenFolder()
	}
	err = g.Agree(b, err)
	if err != nil {
		if run != nil {
			run.Close()
		}
		if mf != nil {
			mf.Close()
		}
		return Result{}, err
	}
	defer run.Close()
	if restart != "" && lead {
		run.Warnings = append([]string{restart}, run.Warnings...)
	}
	run.StopAfter, run.BeforeCommit, run.Stop = h.StopAfter, h.BeforeCommit, h.Stop
	res := Result{Step: run.Step, Steps: run.Steps, Done: run.Step >= run.Steps}
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
	err = run.Train(w, func(m Metrics) {
		res.Last = m
		if progress != nil {
			progress(m)
		}
	})
	res.Step, res.Stopped = run.Step, run.Stopped
	if err != nil {
		return res, err
	}
	if lead {
		if serr := mf.Sync(); serr != nil {
			err = fmt.Errorf("finetune: %w", serr)
		}
	}
	_, err = g.AgreeGather(b, err, nil, 0)
	if err == nil && run.Step >= run.Steps {
		err = run.exportFinal(res.Done)
	}
	return res, err
}

// finalShardBytes splits RUN/final's weights into files as HF
// transformers does by default ("5GB").
const finalShardBytes = 5_000_000_000

// exportFinal writes the finished run's HF checkpoint, FinalDir, from its
// latest checkpoint, streaming (checkpoints.ExportPlan): anew after
// training, and when the run was already finished only if it is missing
// (a kill between the last commit and the export). On a grid it is
// collective and the ranks share the work, each writing every
// world-size-th weight file: rank 0 makes the temporary folder and tells
// the others its name and the checkpoint, all agree once their files are
// written, and rank 0 finishes the folder (index, tokenizer, config) and
// puts it in place.
func (r *Run) exportFinal(already bool) error {
	g, b := r.Model.Grid(), r.Model.Backend()
	lead := g.Rank() == 0
	final := filepath.Join(r.Config.Out, FinalDir)
	var tmp, latest string
	var err error
	if lead {
		tmp, latest, err = prepareFinal(r.Config.Out, already)
	}
	done := false
	defer func() {
		if lead && tmp != "" && !done {
			os.RemoveAll(tmp)
		}
	}()
	if _, err = g.AgreeGather(b, err, nil, 0); err == nil {
		var shared []byte
		shared, err = g.Broadcast(b, []byte(tmp+"\x00"+latest), 8192)
		tmp, latest, _ = strings.Cut(string(shared), "\x00")
	}
	if err != nil || tmp == "" {
		return err // tmp "": nothing to export
	}
	if a := r.Model.Adapter(); a != nil {
		// A LoRA run's final is its adapter, in PEFT's format, from the
		// model (which holds the latest checkpoint's when already done):
		// every rank holds it whole, so rank 0 writes it.
		if lead {
			if err = checkpoints.SaveAdapter(tmp, r.Model.Config, a, r.Model.AdapterTensors()); err == nil {
				err = checkpoints.CommitFolder(tmp, final)
				done = err == nil
			}
		}
		_, err = g.AgreeGather(b, err, nil, 0)
		return err
	}
	dtype := checkpoints.DTypeF32
	if r.Config.SaveDType == "bf16" {
		dtype = checkpoints.DTypeBF16
	}
	plan, err := checkpoints.PlanExport(latest, checkpoints.ExportOptions{DType: dtype, MaxShardBytes: finalShardBytes})
	if err == nil {
		defer plan.Close()
		for i := g.Rank(); i < plan.Files() && err == nil; i += g.World.Size() {
			err = plan.WriteFile(tmp, i)
		}
	}
	_, err = g.AgreeGather(b, err, nil, 0)
	if err == nil && lead {
		err = plan.Finish(tmp, final)
		done = err == nil
	}
	_, err = g.AgreeGather(b, err, nil, 0)
	return err
}

// prepareFinal clears the way for the run's export into run/FinalDir and
// returns its temporary folder and the checkpoint to export, or tmp ""
// when there is nothing to do (already finished, and exported).
func prepareFinal(run string, already bool) (tmp, latest string, err error) {
	final := filepath.Join(run, FinalDir)
	for _, done := range []string{checkpoints.ConfigFile, checkpoints.AdapterConfigFile} {
		if _, err := os.Stat(filepath.Join(final, done)); already && err == nil {
			return "", "", nil
		}
	}
	if latest, err = LatestCheckpoint(filepath.Join(run, CheckpointsDir)); err != nil {
		return "", "", err
	}
	if err := os.RemoveAll(final); err != nil {
		return "", "", fmt.Errorf("finetune: %w", err)
	}
	// An export a kill interrupted.
	left, _ := filepath.Glob(filepath.Join(run, ".tmp-"+FinalDir+"-*"))
	for _, l := range left {
		os.RemoveAll(l)
	}
	tmp, err = checkpoints.ExportTemp(final)
	return tmp, latest, err
}

// checkShared checks that every rank of grid g sees the run folder dir
// that rank 0 writes: rank 0 writes a marker file there and tells the
// others its name, each looks for it, and all agree. Ranks on nodes
// without a shared filesystem would each write a checkpoint of their own
// pieces that no rank could load.
func checkShared(dir string, b engine.Backend, g *parallel.Grid) error {
	if g.World.Size() == 1 {
		return nil
	}
	var marker string
	var err error
	if g.Rank() == 0 {
		var f *os.File
		if f, err = os.CreateTemp(dir, ".shared-"); err == nil {
			marker = f.Name()
			err = f.Close()
		}
		if err != nil {
			err = fmt.Errorf("finetune: %w", err)
		}
		defer os.Remove(marker)
	}
	all, err := g.AgreeGather(b, err, []byte(marker), 4096)
	if err != nil {
		return err
	}
	marker = string(all[0])
	if _, serr := os.Stat(marker); serr != nil {
		host, _ := os.Hostname()
		err = fmt.Errorf("finetune: host %s cannot see %s, which rank 0 wrote: the ranks of a run on several nodes need its folder on a filesystem they all share", host, marker)
	}
	_, err = g.AgreeGather(b, err, nil, 0)
	return err
}
