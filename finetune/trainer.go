package finetune

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/goldfish"
	"github.com/memtrain/memtrain/internal/units"
	"github.com/memtrain/memtrain/memorization"
)

// Metrics is one line of metrics.jsonl, written after every step.
type Metrics struct {
	Schema       int      `json:"schema"` // 1
	Step         int      `json:"step"`
	Epoch        int      `json:"epoch"`
	LR           float64  `json:"lr"`
	Loss         float64  `json:"loss"`           // mean over kept targets
	LossAll      float64  `json:"loss_all"`       // mean over every non-padding target, dropped ones included
	Kept         float64  `json:"kept_tokens"`    // targets in the loss
	Targets      float64  `json:"targets"`        // non-padding targets
	DroppedFrac  float64  `json:"dropped_frac"`   // goldfish drops / non-padding targets
	GradNorm     float64  `json:"grad_norm"`      // before clipping
	Clipped      bool     `json:"clipped"`        //
	TokensPerS   float64  `json:"tokens_per_s"`   // input tokens of the step / its wall time
	ModelFLOPsPS float64  `json:"model_flops_ps"` // tokens/s × model FLOPs per token
	EvalLoss     float64  `json:"eval_loss,omitempty"`
	EvalPerplex  float64  `json:"eval_perplexity,omitempty"`
	Samples      []Sample `json:"samples,omitempty"` // Config.Samples, on their steps
	// Extraction is Config.Extraction's measurement, on its steps.
	Extraction    *memorization.ExtractionSummary `json:"extraction,omitempty"`
	CheckpointDir string                          `json:"checkpoint,omitempty"`
	// SaveBlockedS is the time the step loop spent saving checkpoints
	// since the previous line: a whole save when synchronous; with
	// save_async, copying to the host, waiting for the previous save and
	// committing.
	SaveBlockedS float64 `json:"save_blocked_s,omitempty"`
}

const metricsSchema = 1

// MarshalJSON writes a loss that is not a number as null: a step whose
// every target the goldfish mask dropped has no loss, and JSON has no NaN
// (without this the step's line could not be written and the run would
// stop).
func (m Metrics) MarshalJSON() ([]byte, error) {
	type plain Metrics
	finite := func(x float64) *float64 {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil
		}
		return &x
	}
	return json.Marshal(struct {
		plain
		Loss    *float64 `json:"loss"`
		LossAll *float64 `json:"loss_all"`
	}{plain(m), finite(m.Loss), finite(m.LossAll)})
}

// Run is a fine-tuning run in progress. On a grid (OpenParallel) every
// rank has its own Run over its shards and its share of each batch, and
// calls the same methods in the same order.
type Run struct {
	Config Config
	Model  *llama.Model
	Opt    *Optimizer
	Store  *data.Store
	Loader *data.Loader
	Steps  int // total optimizer steps
	Step   int // steps done
	// StopAfter, when positive, ends Train after that step (with a
	// checkpoint) as if the run were interrupted; --resume continues it.
	StopAfter int
	// BeforeCommit is passed to SaveCheckpoint (crash-safety tests).
	BeforeCommit func(step int, tmpDir string)
	// Stop, if set, is polled after every step on every rank; once it
	// returns true on any rank (a signal), every rank saves a checkpoint
	// and Train returns with Stopped set. On a grid the ranks agree on
	// the step with one scalar all-reduce a step.
	Stop func() bool
	// Stopped says that Train returned early, at Step, through Stop or
	// StopAfter, with a checkpoint of that step.
	Stopped bool
	// Warnings are one-line messages for the user from opening the run:
	// a damaged checkpoint passed over on resume, or one resumed
	// unverified. On a grid only rank 0 has them.
	Warnings []string
	masker   *goldfish.Masker
	perEpoch int               // optimizer steps of one pass over the training data
	files    map[string][]byte // tokenizer files carried into checkpoints
	// ident is the run's identity, saved in its checkpoints (identity.go);
	// legacyIdentity says it resumed a checkpoint saved before identities,
	// whose digest covers the paths as config.yaml gave them, so that
	// config.yaml keeps them as they were.
	ident          map[string]string
	legacyIdentity bool
	sampleTok      *tokenizer.Tokenizer // Config.Samples' prompts' tokenizer
	sampleIDs      [][]int32            // and their tokens
	extract        *extraction          // Config.Extraction's documents, prepared
	metrics        io.Writer

	tokensSeen int64   // input tokens of the steps done, as tokens_per_s counts them
	lastLoss   float64 // the loss of the last step that had one
	watch      divergence
	saved      []savedCheckpoint // by this run, or resumed from; oldest first
	heldout    *Sequences        // the holdout split, read on the first Evaluate

	pending     *pendingSave // an asynchronous save being written
	snap        snapshot     // its host copy, reused
	saveBlocked float64      // seconds the step loop spent saving since the last metrics line
}

// Open prepares a run: it opens the dataset and the model, checks that
// they belong together, and restores a checkpoint when resume names a run
// folder (or one of its checkpoints).
func Open(cfg Config, b engine.Backend, resume string) (*Run, error) {
	return OpenParallel(cfg, b, nil, resume)
}

// OpenParallel is Open for one rank of a grid (nil: one rank, the grid of
// one rank): the model
// holds this rank's shards, read from the checkpoint alone, and the loader
// yields this rank's data·Z share of each global batch. A checkpoint saved
// on any grid resumes on any other.
func OpenParallel(cfg Config, b engine.Backend, grid *parallel.Grid, resume string) (*Run, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	grid = parallel.OrOne(grid, b)
	ranks, rank := grid.BatchRanks(), grid.BatchRank()
	if cfg.MicroBatch%ranks != 0 {
		return nil, fmt.Errorf("finetune: micro_batch %d does not split over the %d data×Z ranks of grid %v (each takes micro_batch/%d sequences)", cfg.MicroBatch, ranks, grid.Shape(), ranks)
	}
	store, err := data.OpenStore(cfg.Data)
	if err != nil {
		return nil, err
	}
	// Before the model loads: a batch the split cannot fill.
	if err := checkBatch(cfg, store); err != nil {
		store.Close()
		return nil, err
	}
	ck, err := checkpoints.Open(cfg.Model)
	if err != nil {
		store.Close()
		return nil, err
	}
	defer ck.Close()
	r := &Run{Config: cfg, Store: store, watch: divergence{cfg: cfg.Divergence}}
	fail := func(err error) (*Run, error) {
		r.Close()
		return nil, err
	}

	if r.files, err = checkpoints.ReadTokenizerFiles(cfg.Model); err != nil {
		return fail(err)
	}
	if err := checkDataFits(cfg, store, ck.Config, r.files); err != nil {
		return fail(err)
	}
	if cfg.Samples.Every > 0 {
		if err := r.prepareSamples(ck.Config.MaxPositionEmbeddings); err != nil {
			return fail(err)
		}
	}
	if cfg.Extraction.Every > 0 {
		if err := r.prepareExtraction(ck.Config.MaxPositionEmbeddings); err != nil {
			return fail(err)
		}
	}
	if cfg.Loss == Goldfish {
		if r.masker, err = goldfish.New(cfg.Goldfish); err != nil {
			return fail(err)
		}
	}
	if r.Loader, err = data.NewLoader(store, data.LoaderConfig{Split: data.Train, BatchSize: cfg.BatchSize, Shuffle: true, Seed: cfg.Seed, Ranks: ranks, Rank: rank}); err != nil {
		return fail(err)
	}
	r.perEpoch = int((r.Loader.NumSequences() + int64(cfg.BatchSize) - 1) / int64(cfg.BatchSize))
	r.Steps = cfg.MaxSteps
	if r.Steps <= 0 {
		steps, ok := units.MulInt(int64(r.perEpoch), int64(cfg.Epochs))
		if !ok || steps > units.MaxCount {
			return fail(fmt.Errorf("finetune: epochs %d × %d steps an epoch is more than %d steps", cfg.Epochs, r.perEpoch, units.MaxCount))
		}
		r.Steps = int(steps)
	}
	if r.Config.Schedule.Total == 0 {
		r.Config.Schedule.Total = r.Steps
	}
	if err := r.Config.Schedule.Validate(); err != nil {
		return fail(err)
	}
	opt, err := cfg.ModelOptions(ck.Config)
	if err != nil {
		return fail(err)
	}
	opt.Parallel = grid
	if r.Model, err = llama.Load(b, ck, opt); err != nil {
		return fail(err)
	}
	if opt.LoRA != nil {
		if err := r.startAdapters(ck.Config); err != nil {
			return fail(err)
		}
	}
	if r.Opt, err = newRunOptimizer(cfg, r.Model); err != nil {
		return fail(err)
	}
	if r.ident, err = r.identity(); err != nil {
		return fail(err)
	}
	if cfg.EvalEvery > 0 && store.NumSequences(data.Holdout) == 0 {
		r.Warnings = append(r.Warnings, fmt.Sprintf("finetune: eval_every %d: %s has no holdout split, so no held-out loss is measured (prepare the data with a holdout fraction, e.g. data prepare --holdout 0.05)", cfg.EvalEvery, cfg.Data))
	}
	if resume != "" {
		if err := r.resume(resume); err != nil {
			return fail(err)
		}
	}
	return r, nil
}

// Close releases the run's model, optimizer state and dataset; an
// asynchronous save still being written is waited for and dropped.
func (r *Run) Close() {
	r.dropSave()
	if r.Opt != nil {
		r.Opt.Free()
	}
	if r.Model != nil {
		r.Model.Free()
	}
	if r.Store != nil {
		r.Store.Close()
	}
}

// ranks is the number of ranks that split each batch (1 on one rank).
func (r *Run) ranks() int { return r.Model.Grid().BatchRanks() }

// batchRank is this rank's place among the ranks that split each batch.
func (r *Run) batchRank() int { return r.Model.Grid().BatchRank() }

// microBatches cuts this rank's share of a global batch into
// micro-batches, applying the goldfish mask to each sequence's targets.
// It returns the non-padding target count and the goldfish drops among
// them.
func (r *Run) microBatches(g data.Batch) ([]llama.Batch, float64, float64) {
	var targets, dropped float64
	for _, w := range g.Weights {
		targets += float64(w)
	}
	var padding []float32 // the weights before goldfish, for the all-token loss
	if r.masker != nil {
		padding = append([]float32(nil), g.Weights...)
		for s := 0; s < g.B; s++ {
			row := g.Weights[s*g.T : (s+1)*g.T]
			dropped += float64(r.masker.Apply(g.Targets[s*g.T:(s+1)*g.T], row))
		}
	}
	var out []llama.Batch
	// Each sequence's dropout key: its place in the run's stream of
	// sequences (this rank's share of a global batch is rows
	// [rank·B, (rank+1)·B) of it), with the seed.
	keys := make([]uint64, g.B)
	first := uint64(g.Position) + uint64(r.batchRank()*g.B)
	for i := range keys {
		keys[i] = r.Config.Seed*0x9E3779B97F4A7C15 ^ (first + uint64(i))
	}
	mb := r.Config.MicroBatch / r.ranks()
	for s := 0; s < g.B; s += mb {
		n := min(mb, g.B-s)
		lo, hi := s*g.T, (s+n)*g.T
		b := llama.Batch{B: n, T: g.T, IDs: g.IDs[lo:hi], Targets: g.Targets[lo:hi], Weights: g.Weights[lo:hi], Keys: keys[s : s+n]}
		if padding != nil {
			b.ReportWeights = padding[lo:hi]
		}
		out = append(out, b)
	}
	return out, targets, dropped
}

// TrainOne runs the next optimizer step and returns its metrics. A loss
// far above its running median (Config.Divergence) returns them with an
// error wrapping ErrDiverged; the step is done.
func (r *Run) TrainOne() (Metrics, error) {
	g, err := r.Loader.Next()
	if err != nil {
		return Metrics{}, err
	}
	start := time.Now()
	r.Model.Grid().World.SetStep(r.Step + 1) // for watchdog messages
	micro, targets, dropped := r.microBatches(g)
	counts := []float64{targets, dropped}
	if err := r.Model.SumBatch(counts); err != nil {
		return Metrics{}, fmt.Errorf("finetune: step %d: %w", r.Step+1, err)
	}
	targets, dropped = counts[0], counts[1]
	lr := r.Config.Schedule.At(r.Step)
	res, err := TrainStep(r.Model, r.Opt, micro, lr, r.Config.Clip)
	if err != nil {
		return Metrics{}, fmt.Errorf("finetune: step %d: %w", r.Step+1, err)
	}
	r.Step++
	dt := time.Since(start).Seconds()
	tokens := float64(r.Config.BatchSize * g.T)
	r.tokensSeen += int64(r.Config.BatchSize * g.T)
	if !math.IsNaN(res.Loss) { // NaN: a batch with nothing to learn from
		r.lastLoss = res.Loss
	}
	m := Metrics{
		Schema: metricsSchema, Step: r.Step, Epoch: g.Epoch, LR: lr, Loss: res.Loss, LossAll: res.LossAll, Kept: res.Weight, Targets: targets,
		GradNorm: res.GradNorm, Clipped: res.Clipped, TokensPerS: tokens / dt,
	}
	if targets > 0 {
		m.DroppedFrac = dropped / targets
	}
	m.ModelFLOPsPS = m.TokensPerS * engine.ModelFLOPsPerToken(r.Model.Config, g.T)
	return m, r.watch.observe(r.Step, res.Loss)
}

// Evaluate returns the mean loss over every target of the holdout split,
// or NaN when the dataset has none (llama.Model.Score of the split's
// Sequences: on a grid the data·Z ranks take eval_batch sequences a round
// between them).
func (r *Run) Evaluate() (float64, error) {
	if r.Store.NumSequences(data.Holdout) == 0 {
		return math.NaN(), nil
	}
	if r.heldout == nil {
		src, err := NewSequences(r.Store, data.Holdout)
		if err != nil {
			return 0, err
		}
		r.heldout = src
	}
	batch := r.Config.EvalBatch
	if batch == 0 {
		batch = r.Config.MicroBatch
	}
	sc, err := r.Model.Score(r.heldout, llama.ScoreOptions{Docs: r.heldout.Docs(), Batch: max(1, batch/r.ranks())})
	if err != nil {
		return 0, err
	}
	return sc.Mean(), nil
}

// Save writes a checkpoint of the run's current state, synchronously
// (an asynchronous save in progress commits first).
func (r *Run) Save() (string, error) { return r.save(false) }

// save writes a checkpoint of the current step, in the background when
// async (save_async): it waits for the previous save to commit, copies
// this rank's pieces to the host, and returns; pollSave commits it once
// every rank has written its files.
func (r *Run) save(async bool) (string, error) {
	start := time.Now()
	defer func() { r.saveBlocked += time.Since(start).Seconds() }()
	if err := r.pollSave(true); err != nil {
		return "", err
	}
	st := TrainerState{Step: r.Step, OptimizerStep: r.Opt.Step, LoaderPosition: r.Loader.Position(), TokensSeen: r.tokensSeen, LastLoss: r.lastLoss,
		ConfigHash: r.Config.resumeHash(), Identity: r.ident, Divergence: r.divergenceState()}
	dir, name := filepath.Dir(r.checkpointPath()), filepath.Base(r.checkpointPath())
	opt := SaveOptions{Files: r.files, Keep: r.Config.Keep, Protect: r.protected(dir)}
	if r.BeforeCommit != nil {
		step := r.Step
		opt.BeforeCommit = func(tmp string) { r.BeforeCommit(step, tmp) }
	}
	if !async {
		if err := SaveCheckpoint(dir, name, r.Model, r.Opt, st, opt); err != nil {
			return "", err
		}
		r.saved = append(r.saved, savedCheckpoint{step: r.Step, path: r.checkpointPath()})
		return r.checkpointPath(), nil
	}
	sv, err := beginSave(dir, name, r.Model, r.Opt, st, opt)
	if err != nil {
		return "", err
	}
	if err := r.snap.take(r.Model, r.Opt); err != nil {
		sv.abandon()
		return "", err
	}
	p := &pendingSave{sv: sv, step: r.Step, path: r.checkpointPath(), done: make(chan struct{})}
	src := r.snap.source()
	go func() {
		defer close(p.done)
		sv.sums, sv.err = sv.write(src)
	}()
	r.pending = p
	return r.checkpointPath(), nil
}

// A pendingSave is an asynchronous save whose files a goroutine writes.
type pendingSave struct {
	sv   *save
	step int
	path string
	done chan struct{} // closed when this rank's files are written
}

// pollSave commits the pending asynchronous save once every rank has
// written its files: at once if wait, which waits for them, else only if
// they all have (one scalar all-reduce on a grid, in the step loop, so
// that the ranks agree at the same step; the writing goroutines call no
// collective).
func (r *Run) pollSave(wait bool) error {
	p := r.pending
	if p == nil {
		return nil
	}
	start := time.Now()
	defer func() { r.saveBlocked += time.Since(start).Seconds() }()
	done := wait
	if wait {
		<-p.done
	} else {
		select {
		case <-p.done:
			done = true
		default:
		}
	}
	if !wait {
		busy, err := r.Model.Grid().Any(r.Model.Backend(), !done)
		if err != nil {
			return fmt.Errorf("finetune: step %d: %w", r.Step, err)
		}
		done = !busy
	}
	if !done {
		return nil
	}
	if !wait {
		<-p.done // every rank said it is done
	}
	r.pending = nil
	if err := p.sv.finish(); err != nil {
		return err
	}
	r.saved = append(r.saved, savedCheckpoint{step: p.step, path: p.path})
	return nil
}

// dropSave waits for a pending asynchronous save's files and drops it
// without committing (the run is ending on an error, or closed).
func (r *Run) dropSave() {
	if p := r.pending; p != nil {
		<-p.done
		p.sv.abandon()
		r.pending = nil
	}
}

// Train runs the remaining steps: metrics to w (one JSON line per step),
// held-out evaluation every EvalEvery steps, a checkpoint every SaveEvery
// steps and at the end. progress, if not nil, sees each step's metrics. A
// non-finite loss, or a divergence (Config.Divergence), stops the run with
// an error naming the last good checkpoint — the newest saved before the
// loss left its band; the weights of the failed step are not saved. On a grid
// every rank computes the same metrics, and only rank 0 writes them to w.
func (r *Run) Train(w io.Writer, progress func(Metrics)) error {
	if r.Model.Grid().Rank() != 0 {
		w = io.Discard
	}
	enc := json.NewEncoder(w)
	for r.Step < r.Steps {
		m, err := r.TrainOne()
		if errors.Is(err, ErrNonFinite) || errors.Is(err, ErrDiverged) {
			// The save in flight is of a step before this one: it
			// commits, and may be the last good checkpoint.
			if perr := r.pollSave(true); perr != nil {
				return perr
			}
			return r.stopped(err)
		}
		if err == nil {
			err = r.pollSave(false)
		}
		if err != nil {
			r.dropSave()
			return err
		}
		if r.Config.EvalEvery > 0 && (r.Step%r.Config.EvalEvery == 0 || r.Step == r.Steps) {
			l, err := r.Evaluate()
			if err != nil {
				return err
			}
			if !math.IsNaN(l) {
				m.EvalLoss, m.EvalPerplex = l, math.Exp(l)
			}
		}
		if s := r.Config.Samples; s.Every > 0 && (r.Step%s.Every == 0 || r.Step == r.Steps) {
			if m.Samples, err = r.Sample(); err != nil {
				return err
			}
		}
		if e := r.Config.Extraction; e.Every > 0 && (r.Step%e.Every == 0 || r.Step == r.Steps || (e.FirstPass && r.Step == r.perEpoch)) {
			if m.Extraction, err = r.Extract(); err != nil {
				return err
			}
		}
		stop, err := r.stopRequested()
		if err != nil {
			return err
		}
		save := (r.Config.SaveEvery > 0 && r.Step%r.Config.SaveEvery == 0) || r.Step == r.Steps || stop
		if save {
			m.CheckpointDir = r.checkpointPath()
		}
		m.SaveBlockedS, r.saveBlocked = r.saveBlocked, 0
		// The step's line is durable before its checkpoint commits: a
		// kill after the commit then loses no line, and a kill before it
		// leaves a line past the checkpoint, which the resumed run's
		// folder trims (OpenFolder).
		if err := enc.Encode(m); err != nil {
			return fmt.Errorf("finetune: metrics: %w", err)
		}
		if save {
			if f, ok := w.(interface{ Sync() error }); ok {
				if err := f.Sync(); err != nil {
					return fmt.Errorf("finetune: metrics: %w", err)
				}
			}
			// The last checkpoint, and one at a stop, commit before Train
			// returns.
			if _, err := r.save(r.Config.SaveAsync && !stop && r.Step < r.Steps); err != nil {
				r.dropSave()
				return err
			}
		}
		if progress != nil {
			progress(m)
		}
		if stop {
			r.Stopped = r.Step < r.Steps
			break
		}
	}
	return nil
}

// stopRequested says whether the run stops after this step: StopAfter, or
// Stop on any rank.
func (r *Run) stopRequested() (bool, error) {
	stop := r.StopAfter > 0 && r.Step >= r.StopAfter
	if r.Stop == nil {
		return stop, nil
	}
	asked := r.Stop()
	var err error
	if asked, err = r.Model.Grid().Any(r.Model.Backend(), asked); err != nil {
		return false, fmt.Errorf("finetune: step %d: %w", r.Step, err)
	}
	return stop || asked, nil
}

// checkpointPath is where Save writes the checkpoint of the current step.
func (r *Run) checkpointPath() string {
	return filepath.Join(r.Config.Out, "checkpoints", StepName(r.Step))
}

// ModelOptions are the model's options for a run on a model of mc: its
// recomputation and activation dtype (the precision key), and with a lora block the adapters and the dtype the
// frozen base is held in.
func (c *Config) ModelOptions(mc *checkpoints.Config) (llama.Options, error) {
	act, err := c.activations()
	if err != nil {
		return llama.Options{}, err
	}
	opt := llama.Options{Recompute: llama.Recompute(c.Recompute), Activations: act, SplitMaster: c.Master == "split", FusedOptimizer: c.Optimizer.Fused}
	base, err := filepath.Abs(c.Model)
	if err != nil {
		base = c.Model
	}
	if opt.LoRA, err = c.LoRA.Adapter(base); err != nil || opt.LoRA == nil {
		return opt, err
	}
	stored := checkpoints.DTypeF32
	if d, err := checkpoints.ParseDType(mc.TorchDType); err == nil {
		stored = d
	}
	opt.BaseDType, err = c.LoRA.baseDType(stored, act)
	return opt, err
}

// startAdapters gives a new LoRA run its adapters: lora.init's, which
// must be of the run's rank, alpha and targets, or PEFT's initialisation
// from the run's seed. (A resumed run then loads its checkpoint's.) The
// adapter's configuration joins the files every checkpoint carries.
func (r *Run) startAdapters(mc *checkpoints.Config) error {
	a := r.Model.Adapter()
	if dir := r.Config.LoRA.Init; dir != "" {
		ad, err := checkpoints.OpenAdapter(dir, mc)
		if err != nil {
			return err
		}
		defer ad.Close()
		if c := ad.Config; c.R != a.R || c.LoRAAlpha != a.LoRAAlpha || c.UseRSLoRA != a.UseRSLoRA || !slices.Equal(c.TargetModules, a.TargetModules) {
			return fmt.Errorf("finetune: lora.init: %s is an adapter of rank %d, alpha %v, rslora %v on %s; the run's lora block asks for rank %d, alpha %v, rslora %v on %s",
				dir, c.R, c.LoRAAlpha, c.UseRSLoRA, strings.Join(c.TargetModules, ","), a.R, a.LoRAAlpha, a.UseRSLoRA, strings.Join(a.TargetModules, ","))
		}
		if err := r.Model.LoadAdapters(ad.Weights); err != nil {
			return fmt.Errorf("finetune: lora.init: %s: %w", dir, err)
		}
	} else {
		r.Model.InitAdapters(r.Config.Seed)
	}
	raw, err := checkpoints.AdapterConfigJSON(a)
	if err != nil {
		return err
	}
	r.files[checkpoints.AdapterConfigFile] = raw
	return nil
}
