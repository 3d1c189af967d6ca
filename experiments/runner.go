package experiments

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/data/assets"
	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/experiments/report"
	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/finetune/job"
	"github.com/memtrain/memtrain/internal/atomicfile"
	"github.com/memtrain/memtrain/internal/inputfile"
	"github.com/memtrain/memtrain/internal/units"
	"github.com/memtrain/memtrain/memorization"
)

// Progress is a step of a long phase, for progress bars.
type Progress struct {
	Phase  string // e.g. "pretrain", "train standard-s1", "eval standard-s1 goldfish-50"
	Done   int
	Total  int
	Unit   string // what Done and Total count: "bases", "steps", "passes" (a document scored or decoded)
	Detail string // e.g. the loss
}

// A Runner runs a spec into an output folder. It is resumable: a finished
// base model, dataset, arm or evaluation is not redone, and an interrupted
// training run continues from its last checkpoint.
type Runner struct {
	Spec *Spec
	Out  string
	// Launch is where models train and are evaluated: one rank on a
	// device (the zero Grid), or a grid of in-process ranks, on the CPU
	// or a GPU a rank, exactly as finetune runs. Every rank of a grid
	// trains and evaluates; the lead rank writes the study's files.
	Launch launch.Spec
	// Log receives one line per event (phases started and finished,
	// warnings); nil discards them.
	Log io.Writer
	// Progress, if set, sees the steps of each long phase.
	Progress func(Progress)
	// Strict makes documents too short for a protocol an error.
	Strict bool
	// Stop, if set, is polled after every training step and between
	// phases; once it returns true the runner saves a checkpoint and
	// returns a *StoppedError (run it again to continue).
	Stop func() bool
	// Version is memtrain's version, part of the key of cached base
	// models (a base made by another release is made again).
	Version string
	// Cache is the folder of base models shared by studies; empty is
	// CacheDir().
	Cache string

	bases    map[string]string // checkpoint of each base folder, once made or found
	tok      *tokenizer.Tokenizer
	tokFiles map[string][]byte
	sel      *Selection
	// fillerHeld are the held-out filler documents' ids (truncated as the
	// arms' training data is), the utility measure.
	fillerHeld [][]int32
	baseLoss   map[baseScore]float64 // held-out losses of each base model
	models     map[string]string     // each base's model: as the spec gives it → its checkpoint folder
}

// armRun is one arm and seed, resolved.
type armRun struct {
	arm  *Arm
	seed uint64
	base Base
	cfg  finetune.Config
	// index is the run's place in the study, 1 to of, as progress names
	// it.
	index, of int
}

func (r *Runner) logf(format string, args ...any) {
	if r.Log != nil {
		fmt.Fprintf(r.Log, format+"\n", args...)
	}
}

func (r *Runner) progress(p Progress) {
	if r.Progress != nil {
		r.Progress(p)
	}
}

// Run runs every arm and seed of the spec and writes the report. Every
// check that needs no training — the spec, the data files, the target
// selection, the protocols against the documents — happens before any
// training starts.
func (r *Runner) Run() (*report.Written, error) {
	s := r.Spec
	// The checks before any work take a time of their own per arm and per
	// distinct base model, never per run: an arm's configuration differs
	// between its seeds by the seed alone. Stop is polled throughout.
	if r.stopped() {
		return nil, &StoppedError{Phase: preRunCheck}
	}
	var runs []armRun
	for i := range s.Arms {
		a := &s.Arms[i]
		base, err := s.armBase(a)
		if err != nil {
			return nil, err
		}
		cfg, err := s.armConfig(a, s.Seeds[0])
		if err != nil {
			return nil, fmt.Errorf("experiments: arm %s: %w", a.Name, err)
		}
		for _, seed := range s.Seeds {
			cfg.Seed = seed
			runs = append(runs, armRun{arm: a, seed: seed, base: base, cfg: cfg})
		}
		if r.stopped() {
			return nil, &StoppedError{Phase: preRunCheck}
		}
	}
	// One process at a time runs a study in its folder.
	unlock, err := finetune.Lock(r.Out)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := r.claim(); err != nil {
		return nil, err
	}
	if err := r.resolveModels(runs); err != nil {
		return nil, err
	}
	if err := r.openTokenizer(runs); err != nil {
		return nil, err
	}
	if err := r.checkLaunch(runs); err != nil {
		return nil, err
	}
	if r.stopped() {
		return nil, &StoppedError{Phase: preRunCheck}
	}
	if err := r.prepareData(); err != nil {
		return nil, err
	}
	for i := range runs {
		runs[i].index, runs[i].of = i+1, len(runs)
	}
	for _, ar := range runs {
		if err := r.runArm(ar); err != nil {
			return nil, err
		}
	}
	rep, err := report.Write(r.Out, report.Options{Title: s.Name})
	if err != nil {
		return nil, err
	}
	r.logf("report: %s", rep.Markdown)
	return rep, nil
}

// WriteReport writes the report of the study in dir from its finished
// arms (report.Write), titled, as Run titles it, with the name in the
// spec.yaml the folder keeps (untitled when that cannot be read).
func WriteReport(dir string) (*report.Written, error) {
	opt := report.Options{}
	if s, err := ReadSpec(filepath.Join(dir, "spec.yaml")); err == nil {
		opt.Title = s.Name
	}
	return report.Write(dir, opt)
}

// claim creates the output folder and records the spec in it, or checks
// that the folder holds the same spec (so that resuming never mixes two
// studies).
func (r *Runner) claim() error {
	if err := os.MkdirAll(r.Out, 0o755); err != nil {
		return fmt.Errorf("experiments: %w", err)
	}
	raw := r.Spec.raw
	path := filepath.Join(r.Out, "spec.yaml")
	old, err := inputfile.ReadFile(path)
	switch {
	case err == nil && !bytes.Equal(old, raw):
		return fmt.Errorf("experiments: %s holds another experiment (its spec.yaml differs); give a new --out to start this one", r.Out)
	case err == nil:
		r.logf("resuming %s", r.Out)
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("experiments: %w", err)
	}
	return atomicfile.WriteFile(path, raw)
}

// resolveModels finds the checkpoint folder of every base model the spec
// names (a checkpoint folder, a run folder or its checkpoints/latest file:
// finetune.ResolveModel), logging the checkpoint a run folder resolved to.
func (r *Runner) resolveModels(runs []armRun) error {
	r.models = map[string]string{}
	for _, ar := range runs {
		m := ar.base.Model
		if _, done := r.models[m]; done || m == "" {
			continue
		}
		dir, resolved, err := finetune.ResolveModel(r.Spec.modelPath(m))
		if err != nil {
			return fmt.Errorf("experiments: arm %s: base: %w", ar.arm.Name, err)
		}
		if resolved {
			r.logf("model: %s → %s", r.Spec.modelPath(m), dir)
		}
		r.models[m] = dir
	}
	return nil
}

// openTokenizer loads the spec's tokenizer, or the base checkpoint's, and
// checks that every base model shares it.
func (r *Runner) openTokenizer(runs []armRun) error {
	s := r.Spec
	spec := s.Tokenizer
	if spec == "" {
		spec = r.models[runs[0].base.Model]
	} else if !strings.HasPrefix(spec, "builtin:") {
		spec = s.path(spec)
	}
	tok, files, err := data.OpenTokenizer(spec)
	if err != nil {
		return fmt.Errorf("experiments: tokenizer: %w", err)
	}
	r.tok, r.tokFiles = tok, files
	checked := map[string]bool{} // each base checkpoint's tokenizer once
	for _, ar := range runs {
		if ar.base.Model == "" || checked[ar.base.Model] {
			continue
		}
		checked[ar.base.Model] = true
		if r.stopped() {
			return &StoppedError{Phase: preRunCheck}
		}
		dir := r.models[ar.base.Model]
		t, _, err := data.OpenTokenizer(dir)
		if err != nil {
			return fmt.Errorf("experiments: arm %s: base %s: %w", ar.arm.Name, dir, err)
		}
		if t.Hash() != tok.Hash() {
			return fmt.Errorf("experiments: arm %s: base %s has another tokenizer than %s", ar.arm.Name, dir, spec)
		}
	}
	return nil
}

// A StoppedError says that Stop ended the study: during a training phase
// after a step, with a checkpoint, or between phases (Step 0). Running the
// study again continues it.
type StoppedError struct {
	Phase       string
	Step, Steps int
	Checkpoint  string
}

func (e *StoppedError) Error() string {
	if e.Phase == preRunCheck {
		return "experiments: stopped in " + e.Phase
	}
	if e.Step == 0 {
		return fmt.Sprintf("experiments: stopped before %s", e.Phase)
	}
	return fmt.Sprintf("experiments: stopped in %s after step %d of %d; checkpoint %s", e.Phase, e.Step, e.Steps, e.Checkpoint)
}

// preRunCheck names the checks before any work in a StoppedError and in
// progress.
const preRunCheck = "the pre-run check"

// stopped polls Stop.
func (r *Runner) stopped() bool { return r.Stop != nil && r.Stop() }

// checkLaunch checks, before any work, that the study's launch can run:
// in this process (the runner starts each phase's ranks itself), and on a
// grid that divides every base model.
func (r *Runner) checkLaunch(runs []armRun) error {
	l, err := launch.New(r.Launch)
	if err != nil {
		return fmt.Errorf("experiments: %w", err)
	}
	if l.MPI() {
		return errors.New("experiments: a study runs its grids in one process; under mpirun or srun, run finetune and eval memorization for each arm instead")
	}
	// Each arm's base once (an arm's runs share it: SeedPerRun changes
	// its seed alone, not its shape).
	var bases []armRun
	for i, ar := range runs {
		if i == 0 || ar.arm != runs[i-1].arm {
			bases = append(bases, ar)
		}
	}
	for i, ar := range bases {
		if r.stopped() {
			return &StoppedError{Phase: preRunCheck}
		}
		r.progress(Progress{Phase: preRunCheck, Done: i, Total: len(bases), Unit: "bases"})
		var cfg *checkpoints.Config
		if ar.base.Model != "" {
			cfg, err = checkpoints.ReadConfig(r.models[ar.base.Model])
		} else {
			cfg, err = r.baseConfig(ar.base)
		}
		if err != nil {
			return fmt.Errorf("experiments: arm %s: %w", ar.arm.Name, err)
		}
		spec := r.Launch
		spec.Model = cfg
		if _, err := launch.New(spec); err != nil {
			return fmt.Errorf("experiments: arm %s: %w", ar.arm.Name, err)
		}
	}
	return nil
}

// paths resolves data paths, writing the bundled corpora into OUT/data.
func (r *Runner) paths(ps []string) ([]string, error) {
	out := make([]string, len(ps))
	for i, p := range ps {
		name, ok := builtinData[p]
		if !ok {
			out[i] = r.Spec.path(p)
			continue
		}
		path := filepath.Join(r.Out, "data", "builtin", name)
		if _, err := os.Stat(path); err != nil {
			b, err := assets.Read(name)
			if err != nil {
				return nil, err
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return nil, fmt.Errorf("experiments: %w", err)
			}
			if err := atomicfile.WriteFile(path, b); err != nil {
				return nil, err
			}
		}
		out[i] = path
	}
	return out, nil
}

// trainDir is the dataset the arms train on: the targets (repeated) and
// filler in its train split, the held-out controls in its holdout split.
func (r *Runner) trainDir() string { return filepath.Join(r.Out, "data", "train") }

// targetsFile and heldoutFile hold the chosen targets and held-out
// controls (their text), one JSON line each; fillerHeldoutFile the filler
// documents held out for utility.
func (r *Runner) targetsFile() string { return filepath.Join(r.Out, "data", "targets.jsonl") }
func (r *Runner) heldoutFile() string { return filepath.Join(r.Out, "data", "heldout.jsonl") }
func (r *Runner) fillerHeldoutFile() string {
	return filepath.Join(r.Out, "data", "heldout-filler.jsonl")
}

// prepareData chooses the targets, splits the filler and builds the
// training dataset: each target as many times as it is to be repeated
// (targets.copies), the training filler, and the held-out controls in the
// holdout split. The loader shuffles them.
func (r *Runner) prepareData() error {
	t := &r.Spec.Targets
	paths, err := r.paths(t.Data)
	if err != nil {
		return err
	}
	start := time.Now()
	if r.sel, err = SelectTargets(t, paths, r.tok); err != nil {
		return fmt.Errorf("experiments: %w", err)
	}
	r.logf("targets: %d targets and %d held-out documents of %d–%d tokens chosen from %d candidates (%d left out for a shared %d-token run) in %.1fs",
		len(r.sel.Targets), len(r.sel.Holdout), t.MinTokens, t.MaxTokens, r.sel.Candidates, r.sel.Overlapping, t.Overlap, time.Since(start).Seconds())
	if t.Canaries != nil {
		for i := range r.sel.Targets {
			r.sel.Targets[i].Repetitions = t.copies(i)
		}
	}
	if err := r.checkProtocols(); err != nil {
		return err
	}
	// The filler is read even when the dataset exists: its held-out
	// documents measure every arm's utility.
	var filler, fillerHeld []Passage
	if f := t.Filler; f != nil {
		if filler, fillerHeld, err = r.readFiller(f); err != nil {
			return err
		}
		r.fillerHeld = make([][]int32, len(fillerHeld))
		for i, p := range fillerHeld {
			// Scored as the arms train on text: the first max_tokens.
			r.fillerHeld[i] = p.IDs[:min(len(p.IDs), t.MaxTokens)]
		}
	}
	// The study's data folder holds the chosen documents whatever their
	// source: user files are read in place, only built-in corpora are
	// copied in.
	dataDir := filepath.Join(r.Out, "data")
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return fmt.Errorf("experiments: %w", err)
	}
	files := map[string][]Passage{r.targetsFile(): r.sel.Targets, r.heldoutFile(): r.sel.Holdout}
	if len(fillerHeld) > 0 {
		files[r.fillerHeldoutFile()] = fillerHeld
	}
	for path, ps := range files {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		for _, p := range ps {
			if err := enc.Encode(p); err != nil {
				return err
			}
		}
		if err := atomicfile.WriteFile(path, buf.Bytes()); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(r.trainDir(), "manifest.json")); err == nil {
		return nil
	}
	if err := r.checkDataMemory(len(filler)); err != nil {
		return err
	}
	os.RemoveAll(r.trainDir()) // an interrupted write
	w, err := data.CreateStore(r.trainDir(), data.TokenizerInfoOf(r.tok),
		data.Settings{Mode: data.ModeDocument, SeqLen: t.MaxTokens - 1, BOS: false})
	if err != nil {
		return err
	}
	// The study's dataset decodes its own tokens, as data prepare's do.
	if err := w.AddTokenizer(r.tokFiles); err != nil {
		w.Abort()
		return err
	}
	add := func(p Passage, split data.Split) error {
		_, err := w.Add(data.Document{Source: p.Source, Line: p.Line, IDs: p.IDs, Split: split})
		return err
	}
	// Round after round, every target not yet in as often as it is to be.
	most := 0
	for i := range r.sel.Targets {
		most = max(most, t.copies(i))
	}
	for rep := 0; rep < most; rep++ {
		for i, p := range r.sel.Targets {
			if rep >= t.copies(i) {
				continue
			}
			if err := add(p, data.Train); err != nil {
				w.Abort()
				return err
			}
		}
	}
	for _, p := range filler {
		if err := add(p, data.Train); err != nil {
			w.Abort()
			return err
		}
	}
	for _, p := range r.sel.Holdout {
		if err := add(p, data.Holdout); err != nil {
			w.Abort()
			return err
		}
	}
	m, err := w.Commit(nil, nil)
	if err != nil {
		return err
	}
	what := fmt.Sprintf("%d targets × %d", len(r.sel.Targets), t.Repeat)
	if c := t.Canaries; c != nil {
		what = fmt.Sprintf("%d canaries × each of %s copies", c.PerCount, joinInts(c.Repetitions))
	}
	if len(filler) > 0 {
		what += fmt.Sprintf(", %d filler", len(filler))
	}
	r.logf("dataset %s: %d training documents (%s), %d held out, sequence length %d",
		r.trainDir(), m.Splits.Train.Documents, what, m.Splits.Holdout.Documents, m.Settings.SeqLen)
	if len(fillerHeld) > 0 {
		r.logf("filler: %d documents held out for utility (%s)", len(fillerHeld), r.fillerHeldoutFile())
	}
	return nil
}

// storeDocBytes is what the dataset writer holds of each document until
// it commits (its record, grown by appends, and its index entry), about.
const storeDocBytes = 128

// checkDataMemory checks, before the training dataset is written, that
// the writer's records of its documents — each target as many times as
// it is repeated, the filler and the held-out controls — fit the host's
// free memory (launch.Launcher.Memory, which MEMTRAIN_MEMORY_LIMIT
// overrides).
func (r *Runner) checkDataMemory(filler int) error {
	t := &r.Spec.Targets
	docs := int64(filler + len(r.sel.Holdout))
	for i := range r.sel.Targets {
		docs += int64(t.copies(i))
	}
	l, err := launch.New(launch.Spec{})
	if err != nil {
		return nil // the host is unknown: nothing to check against
	}
	have, err := l.Memory()
	if err != nil || len(have) == 0 || have[0].Free < 0 {
		return nil
	}
	if need := engine.MulBytes(docs, storeDocBytes); need > have[0].Free {
		return fmt.Errorf("experiments: targets: the training data's %d documents (%d targets, each repeated, %d filler and %d held out) need about %s of memory to write, but %s is free (%s)",
			docs, len(r.sel.Targets), filler, len(r.sel.Holdout), engine.FormatNeed(need), units.FormatBytes(have[0].Free), have[0].Source)
	}
	return nil
}

// readFiller reads the filler corpus — Skip documents left out, then
// Documents (0: all) — tokenized, and splits it: Holdout documents chosen
// by the targets' seed are held out (in corpus order), the rest train.
func (r *Runner) readFiller(f *Filler) (train, held []Passage, err error) {
	fp, err := r.paths(f.Data)
	if err != nil {
		return nil, nil, err
	}
	docs, err := readTexts(fp, f.Field, f.Skip, f.Documents)
	if err != nil {
		return nil, nil, err
	}
	n := len(docs.texts)
	if f.Holdout >= n && f.Holdout > 0 {
		return nil, nil, fmt.Errorf("experiments: targets: filler: holdout %d of the %d filler documents leaves none to train on", f.Holdout, n)
	}
	isHeld := make([]bool, n)
	rng := rand.New(rand.NewPCG(r.Spec.Targets.Seed, 0xf111e4))
	for _, i := range rng.Perm(n)[:f.Holdout] {
		isHeld[i] = true
	}
	enc, errs := r.tok.EncodeBatchEach(docs.texts, tokenizer.EncodeOptions{AddSpecial: true}, 0)
	for i, ids := range enc {
		if errs != nil && errs[i] != nil {
			return nil, nil, fmt.Errorf("experiments: %s:%d: %w", docs.docs[i].Source, docs.docs[i].Line, errs[i])
		}
		p := Passage{Source: docs.docs[i].Source, Line: docs.docs[i].Line, Text: docs.texts[i], IDs: ids}
		if isHeld[i] {
			held = append(held, p)
		} else {
			p.Text = "" // only held-out filler is written out
			train = append(train, p)
		}
	}
	return train, held, nil
}

type textDocs struct {
	texts []string
	docs  []data.Document
}

// readTexts reads the text documents of paths after the first skip, at
// most limit of them (0: all).
func readTexts(paths []string, field string, skip, limit int) (*textDocs, error) {
	rd, err := data.NewReader(paths, data.ReadOptions{Field: field})
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	out := &textDocs{}
	for seen := 0; limit <= 0 || len(out.texts) < limit; seen++ {
		d, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if d.IDs != nil {
			return nil, fmt.Errorf("experiments: %s:%d: pre-tokenized documents are not supported (want text)", d.Source, d.Line)
		}
		if seen < skip {
			continue
		}
		out.texts = append(out.texts, d.Text)
		out.docs = append(out.docs, data.Document{Source: d.Source, Line: d.Line})
	}
	return out, nil
}

// evalDocuments are the targets (members) and held-out controls.
func (r *Runner) evalDocuments() []memorization.Document {
	var docs []memorization.Document
	for i, p := range r.sel.Targets {
		docs = append(docs, memorization.Document{ID: i, Member: true, Source: p.Source, Line: p.Line, IDs: p.IDs})
	}
	for i, p := range r.sel.Holdout {
		docs = append(docs, memorization.Document{ID: len(r.sel.Targets) + i, Source: p.Source, Line: p.Line, IDs: p.IDs})
	}
	return docs
}

// checkProtocols counts, before any training, the documents each protocol
// would skip as too short.
func (r *Runner) checkProtocols() error {
	docs := r.evalDocuments()
	for _, p := range r.Spec.Protocols() {
		short := 0
		for _, d := range docs {
			if len(p.Probes(d.ID, d.IDs)) == 0 {
				short++
			}
		}
		if short == 0 {
			continue
		}
		if r.Strict || short == len(docs) {
			return fmt.Errorf("experiments: eval: %d of %d documents are too short for %s (targets are %d–%d tokens)",
				short, len(docs), p, r.Spec.Targets.MinTokens, r.Spec.Targets.MaxTokens)
		}
		r.logf("warning: eval: %d of %d documents are too short for %s and will be skipped", short, len(docs), p)
	}
	return nil
}

// baseModel returns the checkpoint folder of a base model, making it
// (initialised, then pretrained) when it comes from a preset.
func (r *Runner) baseModel(b Base) (string, error) {
	if b.Model != "" {
		return r.models[b.Model], nil
	}
	// The folder is named by everything that makes the model: the base
	// settings, the tokenizer and the pretraining settings (the seed a
	// run gave it, not whether it did).
	kb := b
	kb.SeedPerRun = false
	var pre []byte
	if b.Pretrain != nil {
		p := *b.Pretrain
		pre, _ = yamlOf(&p.Train)
		p.Train = yaml.Node{}
		kb.Pretrain = &p
	}
	key, _ := json.Marshal(struct {
		Base
		Tokenizer, PretrainTrain, Version string
	}{kb, r.tok.Hash(), string(pre), r.Version})
	sum := sha256.Sum256(key)
	name := b.Preset + "-" + hex.EncodeToString(sum[:6])
	if m, ok := r.bases[name]; ok {
		return m, nil
	}
	cache := r.Cache
	if cache == "" {
		var err error
		if cache, err = CacheDir(); err != nil {
			return "", err
		}
	}
	dir := filepath.Join(cache, "bases", name)
	// A cached base is checked against the sums recorded when it was made
	// (every file read once, about a second a GB) before a study uses it;
	// one found damaged is made again.
	model, err := r.verifiedBase(dir, false)
	if err != nil {
		return "", err
	}
	if model != "" {
		r.logf("base %s: reused from the cache %s", name, dir)
	} else {
		// One study at a time makes a base; another one that wants it
		// waits, then finds it made. The folder is complete once
		// base.json is written (atomically, last), and an interrupted
		// making resumes from its checkpoints.
		unlock, err := r.lockBase(dir)
		if err != nil {
			return "", err
		}
		defer unlock()
		if model, err = r.verifiedBase(dir, true); err != nil {
			return "", err
		}
		if model == "" {
			if model, err = r.makeBase(b, dir); err != nil {
				return "", err
			}
			r.logf("base %s: made in the cache %s", name, dir)
		} else {
			r.logf("base %s: reused from the cache %s", name, dir)
		}
	}
	// The study records which cached model its arms start from.
	rec, _ := json.MarshalIndent(struct{ Cache, Model string }{dir, model}, "", "  ")
	if err := os.MkdirAll(filepath.Join(r.Out, "base"), 0o755); err != nil {
		return "", fmt.Errorf("experiments: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(r.Out, "base", name+".json"), append(rec, '\n')); err != nil {
		return "", err
	}
	if r.bases == nil {
		r.bases = map[string]string{}
	}
	r.bases[name] = model
	return model, nil
}

// CacheEnv names the folder of the base models shared by studies. Its
// default is the root engine/cuda keeps its kernels under (cuda/).
const CacheEnv = "MEMTRAIN_CACHE"

// CacheDir is the folder of base models shared by studies:
// $MEMTRAIN_CACHE, else memtrain in the user's cache folder.
func CacheDir() (string, error) {
	if d := os.Getenv(CacheEnv); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("experiments: cache folder: %w", err)
	}
	return filepath.Join(base, "memtrain"), nil
}

// baseRecord is a cached base's base.json: the model folder, relative to
// the base's folder, and the sums of its files when it was made.
type baseRecord struct {
	Model string
	Files map[string]checkpoints.FileSum `json:",omitempty"`
}

// cachedBase reads the record of the finished base in dir (a zero record
// when there is none, or it is damaged: the base is made again).
func (r *Runner) cachedBase(dir string) (baseRecord, error) {
	var rec baseRecord
	raw, err := inputfile.ReadFile(filepath.Join(dir, "base.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return rec, nil
	}
	if err != nil {
		return rec, fmt.Errorf("experiments: %w", err)
	}
	if err := json.Unmarshal(raw, &rec); err != nil || rec.Model == "" || !filepath.IsLocal(rec.Model) {
		return baseRecord{}, nil // a damaged record: make the base again
	}
	return rec, nil
}

// verifiedBase is the checkpoint of the finished base in dir, checked
// against its recorded sums, or "" when there is none or it is damaged:
// everything the base's folder holds is removed (all of it the cache's
// own, made by makeBase), to be made again: deterministically, the same
// base. A base recorded before sums were gets them recorded now.
//
// Only with locked (the caller holds the base's lock) does it change the
// folder: without, a damaged or unrecorded base is "", for the caller to
// take the lock and look again.
func (r *Runner) verifiedBase(dir string, locked bool) (string, error) {
	rec, err := r.cachedBase(dir)
	if err != nil || rec.Model == "" {
		return "", err
	}
	model := filepath.Join(dir, rec.Model)
	if rec.Files == nil {
		if !locked {
			return "", nil
		}
		if rec.Files, err = checkpoints.SumFolder(model); err != nil {
			return "", err
		}
		r.logf("base %s: recorded the sums of its files (made before they were)", dir)
		return model, writeBaseRecord(dir, rec)
	}
	if err := checkpoints.CheckSums(model, rec.Files); err != nil {
		if !locked {
			return "", nil
		}
		r.logf("base %s: damaged: %v: making it again", dir, err)
		return "", clearBase(dir)
	}
	return model, nil
}

// clearBase removes what a cached base's folder holds, its record first
// (so that a kill part way leaves an incomplete base, made again), but
// its lock, which the caller may hold.
func clearBase(dir string) error {
	if err := os.Remove(filepath.Join(dir, "base.json")); err != nil {
		return fmt.Errorf("experiments: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("experiments: %w", err)
	}
	for _, e := range entries {
		if e.Name() == finetune.LockFile {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("experiments: %w", err)
		}
	}
	return nil
}

// writeBaseRecord writes dir's base.json, atomically: the base is
// complete once it is there.
func writeBaseRecord(dir string, rec baseRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("experiments: %w", err)
	}
	return atomicfile.WriteFile(filepath.Join(dir, "base.json"), b)
}

// lockBase takes the lock of a cached base's folder, waiting while another
// study holds it.
func (r *Runner) lockBase(dir string) (func(), error) {
	logged := false
	for {
		unlock, err := finetune.Lock(dir)
		var locked *finetune.LockedError
		if !errors.As(err, &locked) {
			return unlock, err
		}
		if !logged {
			r.logf("base %s: waiting for %s", dir, locked.Note)
			logged = true
		}
		if r.Stop != nil && r.Stop() {
			return nil, &StoppedError{Phase: "base " + filepath.Base(dir)}
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// makeBase initialises the base in dir, pretrains it, and records it.
func (r *Runner) makeBase(b Base, dir string) (string, error) {
	initDir := filepath.Join(dir, "init")
	if _, err := os.Stat(filepath.Join(initDir, checkpoints.ConfigFile)); err != nil {
		cfg, err := r.baseConfig(b)
		if err != nil {
			return "", err
		}
		r.logf("base %s: %s parameters, hidden %d, %d layers", dir, units.FormatCount(cfg.Params().Total), cfg.HiddenSize, cfg.NumHiddenLayers)
		if err := checkpoints.Save(initDir, cfg, checkpoints.RandomWeights(cfg, b.Seed), checkpoints.SaveOptions{Files: r.tokFiles}); err != nil {
			return "", err
		}
	}
	model := "init"
	if p := b.Pretrain; p != nil {
		final, err := r.pretrain(dir, initDir, p)
		if err != nil {
			return "", err
		}
		model, _ = filepath.Rel(dir, final)
	}
	sums, err := checkpoints.SumFolder(filepath.Join(dir, model))
	if err != nil {
		return "", err
	}
	if err := writeBaseRecord(dir, baseRecord{Model: model, Files: sums}); err != nil {
		return "", err
	}
	return filepath.Join(dir, model), nil
}

// baseConfig is the shape of a preset base with the spec's overrides and
// the tokenizer's vocabulary and special tokens.
func (r *Runner) baseConfig(b Base) (*checkpoints.Config, error) {
	p, err := checkpoints.LookupPreset(b.Preset)
	if err != nil {
		return nil, err
	}
	cfg := p.Config()
	cfg.VocabSize = r.tok.VocabSize()
	if err := cfg.Reshape(b.shape()); err != nil {
		return nil, fmt.Errorf("experiments: base %s: %w", b.Preset, err)
	}
	bos, hasBOS := r.tok.BOS()
	eos, hasEOS := r.tok.EOS()
	cfg.SetSpecialTokens(bos, hasBOS, eos, hasEOS)
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("experiments: base %s: %w", b.Preset, err)
	}
	if need := r.Spec.Targets.MaxTokens; need > cfg.MaxPositionEmbeddings {
		return nil, fmt.Errorf("experiments: base %s: targets of up to %d tokens exceed max_position_embeddings %d (set base: max_positions)", b.Preset, need, cfg.MaxPositionEmbeddings)
	}
	return cfg, nil
}

// pretrain trains the initialised base on the pretraining corpus and
// returns its final checkpoint.
func (r *Runner) pretrain(dir, initDir string, p *Pretrain) (string, error) {
	ds := filepath.Join(dir, "data")
	if _, err := os.Stat(filepath.Join(ds, "manifest.json")); err != nil {
		os.RemoveAll(ds)
		paths, err := r.paths(p.Data)
		if err != nil {
			return "", err
		}
		docs, err := readTexts(paths, p.Field, 0, p.Documents)
		if err != nil {
			return "", err
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		for _, t := range docs.texts {
			enc.Encode(map[string]string{"text": t})
		}
		corpus := filepath.Join(dir, "corpus.jsonl")
		if err := atomicfile.WriteFile(corpus, buf.Bytes()); err != nil {
			return "", err
		}
		seqLen := p.SeqLen
		if seqLen == 0 {
			seqLen = 128
		}
		if _, err := data.Prepare(ds, []string{corpus}, r.tok, data.PrepareConfig{Mode: data.ModePack, SeqLen: seqLen, BOS: true, EOS: true, Holdout: 0.02, Seed: 1, TokenizerFiles: r.tokFiles}); err != nil {
			return "", err
		}
	}
	cfg := finetune.DefaultConfig()
	if err := r.Spec.overlay(&p.Train, &cfg); err != nil {
		return "", err
	}
	cfg.Model, cfg.Data, cfg.Out = initDir, ds, filepath.Join(dir, "pretrain")
	return r.finetune(cfg, "pretrain", "pretrain")
}

// finetune runs (or resumes) a fine-tuning run to its end, on every rank
// of the launch, and returns its final checkpoint. phase names it in logs
// and errors, shown in progress (e.g. with the arm's place in the study).
func (r *Runner) finetune(cfg finetune.Config, phase, shown string) (string, error) {
	ckDir := filepath.Join(cfg.Out, "checkpoints")
	resume := ""
	if _, err := finetune.LatestCheckpoint(ckDir); err == nil {
		resume = cfg.Out
	}
	if cfg.EvalEvery == 0 {
		cfg.EvalEvery = units.MaxCount // evaluate once, at the end (no run is longer; a configuration's bound)
	}
	if r.Stop != nil && r.Stop() {
		return "", &StoppedError{Phase: phase}
	}
	start := time.Now()
	l, err := launch.New(r.Launch)
	if err != nil {
		return "", err
	}
	j, err := job.New(cfg, l)
	if err != nil {
		return "", fmt.Errorf("experiments: %s: %w", phase, err)
	}
	var last finetune.Metrics
	// Without a checkpoint there is nothing to continue: a folder left by
	// a run killed before its first save starts over.
	h := finetune.Hooks{Resume: resume, Replace: resume == "", Stop: r.Stop}
	res, _, err := j.Train(h, job.Report{
		Warn: func(w string) { r.logf("warning: %s: %s", phase, w) },
		Started: func(run *finetune.Run) {
			if run.Step < run.Steps {
				r.logf("%s: %d steps from step %d (%s)", phase, run.Steps, run.Step, cfg.Out)
			}
		},
		Progress: func(p job.Progress) {
			last = p.Metrics
			detail := fmt.Sprintf("loss %.3f, %.0f tokens/s", p.Loss, p.TokensPerS)
			if p.EvalLoss > 0 {
				detail += fmt.Sprintf(", held-out %.3f", p.EvalLoss)
				if p.Step < p.Steps { // the last one is in the phase's done line
					r.logf("%s: %s", phase, p.EvalLine())
				}
			}
			for _, line := range p.SampleLines() {
				r.logf("%s: %s", phase, line)
			}
			if e := p.Extraction; e != nil {
				line := fmt.Sprintf("%s: step %d/%d: extraction %s: exact match %.1f%% of targets", phase, p.Step, p.Steps, e.Protocol, 100*e.Members.Exact)
				if e.NonMembers != nil {
					line += fmt.Sprintf(", %.1f%% held out", 100*e.NonMembers.Exact)
				}
				r.logf("%s", line)
			}
			r.progress(Progress{Phase: shown, Done: p.Step, Total: p.Steps, Detail: detail, Unit: "steps"})
		},
	})
	if err != nil {
		return "", err
	}
	if res.Stopped {
		return "", &StoppedError{Phase: phase, Step: res.Step, Steps: res.Steps, Checkpoint: res.Last.CheckpointDir}
	}
	if last.Step > 0 {
		// The final training loss the results and the report give.
		final := last.Loss
		if ms, err := report.ReadMetrics(filepath.Join(cfg.Out, report.MetricsFile)); err == nil && len(ms) > 0 {
			final = report.FinalTrainLoss(ms)
		}
		// Which held-out set: the pretraining's own split of its corpus,
		// or the study's held-out documents (the report's column).
		held := "held-out documents' loss"
		if strings.HasPrefix(phase, "pretrain") {
			held = "loss on the pretraining corpus's held-out split"
		}
		r.logf("%s: done in %.0fs, final training loss %.3f, %s %.3f", phase, time.Since(start).Seconds(), final, held, last.EvalLoss)
	}
	return finetune.LatestCheckpoint(ckDir)
}

// runArm trains and evaluates one arm and seed, unless it is done.
func (r *Runner) runArm(ar armRun) error {
	name := report.ArmDirName(ar.arm.Name, ar.seed)
	dir := filepath.Join(r.Out, "arms", name)
	if _, err := os.Stat(filepath.Join(dir, report.ResultFile)); err == nil {
		r.logf("arm %s: done", name)
		return nil
	}
	start := time.Now()
	base, err := r.baseModel(ar.base.forSeed(ar.seed))
	if err != nil {
		return err
	}
	baseLoss, err := r.baseHeldoutLoss(base, false)
	if err != nil {
		return err
	}
	baseFiller, err := r.baseHeldoutLoss(base, true)
	if err != nil {
		return err
	}
	cfg := ar.cfg
	cfg.Model, cfg.Data, cfg.Out = base, r.trainDir(), filepath.Join(dir, "train")
	if cfg.Extraction.Every > 0 {
		// The curve measures the arm's targets and held-out controls,
		// as its final evaluation does.
		cfg.Extraction.Data, cfg.Extraction.NonMembers = r.targetsFile(), r.heldoutFile()
	}
	final, err := r.finetune(cfg, "train "+name, fmt.Sprintf("train %s (arm %d of %d)", name, ar.index, ar.of))
	if err != nil {
		return err
	}
	metrics, err := report.ReadMetrics(filepath.Join(cfg.Out, report.MetricsFile))
	if err != nil {
		return err
	}
	res := report.ArmResult{Schema: report.ResultSchema, Arm: ar.arm.Name, Seed: ar.seed, Loss: string(cfg.Loss),
		Targets: len(r.sel.Targets), TrainDir: rel(r.Out, cfg.Out), BaseHeldoutLoss: baseLoss}
	if r.Spec.Targets.Canaries != nil {
		for _, p := range r.sel.Targets {
			res.TargetRepetitions = append(res.TargetRepetitions, p.Repetitions)
		}
	}
	if n := len(r.fillerHeld); n > 0 {
		// Utility on the filler's domain: the arm against its base.
		res.FillerHeldout, res.BaseFillerHeldoutLoss = n, baseFiller
		if res.FillerHeldoutLoss, err = r.heldoutLoss(final, r.fillerHeld); err != nil {
			return fmt.Errorf("experiments: arm %s: held-out filler: %w", name, err)
		}
	}
	res.K, res.Strategy, res.H = goldfishOf(cfg)
	if n := len(metrics); n > 0 {
		last := metrics[n-1]
		res.Steps = last.Step
		res.Repeats = (last.Epoch + 1) * r.Spec.Targets.Repeat
		res.HeldoutLoss, res.HeldoutPerplexity = last.EvalLoss, last.EvalPerplex
		res.FinalTrainLoss = report.FinalTrainLoss(metrics)
	}
	// A LoRA arm's final is its adapter on the base.
	ref, _, err := finetune.ResolveAdapted(final, "")
	if err != nil {
		return err
	}
	mcfg, err := checkpoints.ReadConfig(ref.Dir)
	if err != nil {
		return err
	}
	pc := mcfg.Params()
	res.Params, res.NonEmbeddingParams = pc.Total, pc.NonEmbedding
	if ref.Adapter != "" {
		ad, err := checkpoints.OpenAdapter(ref.Adapter, mcfg)
		if err != nil {
			return err
		}
		ac := ad.Config
		ad.Close()
		res.Adapter = fmt.Sprintf("LoRA r%d α%g on %d projections", ac.R, ac.LoRAAlpha, len(ac.TargetModules))
		if ac.UseRSLoRA {
			res.Adapter += ", rsLoRA"
		}
		res.TrainedParams = mcfg.AdapterParams(ac)
	}
	res.Model = modelName(ar.base, mcfg)
	// The protocols left to evaluate are chosen here, once, so that every
	// rank runs the same ones.
	protocols := r.Spec.Protocols()
	summaries := make([]*memorization.Summary, len(protocols))
	var todo []int
	for i, p := range protocols {
		if summaries[i], err = memorization.ReadSummary(filepath.Join(dir, "eval", p.Key(), memorization.SummaryFileName)); err != nil {
			todo = append(todo, i)
		}
	}
	if len(todo) > 0 {
		// Scoring and decoding take ev.Batch documents, of at most the
		// targets' length, at a time.
		batch := r.Spec.Eval.Batch
		if batch <= 0 {
			batch = 8 // memorization's default
		}
		// The base model, the reference-model attack's, is held beside.
		baseCfg, err := checkpoints.ReadConfig(base)
		if err != nil {
			return err
		}
		beside := llama.Memory(baseCfg, llama.Work{Grid: r.Launch.Grid, Overlap: r.Launch.Overlap}).Params
		l, err := r.evalLauncher(ref.Dir, llama.Work{Batch: batch, SeqLen: r.Spec.Targets.MaxTokens, Beside: beside})
		if err != nil {
			return fmt.Errorf("experiments: eval %s: %w", name, err)
		}
		err = l.Run(func(rk launch.Rank) error {
			return r.evaluateArm(rk, ref, base, name, dir, protocols, todo, summaries)
		})
		if err != nil {
			return err
		}
	}
	for i, p := range protocols {
		res.Evals = append(res.Evals, report.Eval{Key: p.Key(), Dir: rel(r.Out, filepath.Join(dir, "eval", p.Key())), Summary: *summaries[i]})
	}
	res.Seconds = time.Since(start).Seconds()
	b, err := json.MarshalIndent(&res, "", "  ")
	if err != nil {
		return fmt.Errorf("experiments: %w", err)
	}
	return atomicfile.WriteFile(filepath.Join(dir, report.ResultFile), append(b, '\n'))
}

// evaluateArm is one rank's evaluation of an arm's final checkpoint with
// the protocols todo: every rank decodes every probe (the grid splits the
// model, not the probes); the lead rank writes each evaluation and its
// summary into summaries. The arm's base model is the reference of the
// reference-model attack.
func (r *Runner) evaluateArm(rk launch.Rank, final finetune.ModelRef, base, name, dir string, protocols []memorization.Protocol, todo []int, summaries []*memorization.Summary) error {
	opt := llama.Options{Parallel: rk.Grid}
	m, err := finetune.LoadModel(rk.Backend, final, opt)
	if err != nil {
		return err
	}
	defer m.Free()
	ref, err := finetune.LoadModel(rk.Backend, finetune.ModelRef{Dir: base}, opt)
	if err != nil {
		return fmt.Errorf("experiments: arm %s: the base model as reference: %w", name, err)
	}
	defer ref.Free()
	docs := r.evalDocuments()
	ev := r.Spec.Eval
	for _, i := range todo {
		p := protocols[i]
		phase := "eval " + name + " " + p.Key()
		cfg := memorization.EvalConfig{Protocol: p, Batch: ev.Batch, MinKPercent: ev.MinK,
			Bootstrap: memorization.Bootstrap{Resamples: ev.Resamples, Seed: ev.Seed, Level: 0.95},
			Decode:    r.tok.DecodeSkipSpecial, Reference: ref}
		if rk.Lead() {
			cfg.Progress = func(scored, nDocs, decoded, probes int) {
				done, total := memorization.EvalProgress(scored, nDocs, decoded, probes)
				r.progress(Progress{Phase: phase, Done: done, Total: total, Unit: "passes"})
			}
		}
		cfg.StopIDs = finetune.StopIDs(r.tok)
		t0 := time.Now()
		s, res, err := memorization.Evaluate(m, docs, cfg)
		if err != nil {
			return fmt.Errorf("experiments: arm %s: %w", name, err)
		}
		if !rk.Lead() {
			continue
		}
		if err := memorization.WriteResults(filepath.Join(dir, "eval", p.Key()), s, res); err != nil {
			return err
		}
		summaries[i] = s
		if pf := s.Prefixes; len(pf) > 0 {
			r.logf("%s: exact match %.1f%% of targets, %.1f%% held out (%.0fs)", phase,
				100*pf[len(pf)-1].Members.Exact.Mean, 100*pf[len(pf)-1].NonMembers.Exact.Mean, time.Since(t0).Seconds())
		}
	}
	return nil
}

// baseScore names a held-out loss of a base model: on the held-out
// controls, or on the held-out filler.
type baseScore struct {
	dir    string
	filler bool
}

// baseHeldoutLoss is the mean loss per target of a base model on the
// held-out documents (the same targets finetune evaluates) or, with
// filler, on the held-out filler; computed once per base.
func (r *Runner) baseHeldoutLoss(dir string, filler bool) (float64, error) {
	key := baseScore{dir, filler}
	if l, ok := r.baseLoss[key]; ok {
		return l, nil
	}
	seqs := r.fillerHeld
	if !filler {
		seqs = make([][]int32, len(r.sel.Holdout))
		for i, p := range r.sel.Holdout {
			seqs[i] = p.IDs
		}
	}
	loss, err := r.heldoutLoss(dir, seqs)
	if err != nil {
		return 0, fmt.Errorf("experiments: base %s: %w", dir, err)
	}
	if r.baseLoss == nil {
		r.baseLoss = map[baseScore]float64{}
	}
	r.baseLoss[key] = loss
	return loss, nil
}

// heldoutLoss is the mean loss per target of the checkpoint in dir on the
// documents seqs (of at most the targets' length): 0 when there are none.
func (r *Runner) heldoutLoss(dir string, seqs [][]int32) (float64, error) {
	if len(seqs) == 0 {
		return 0, nil
	}
	loss := 0.0
	// Score's default batch, of passages of at most the targets' length.
	l, err := r.evalLauncher(dir, llama.Work{Batch: 8, SeqLen: r.Spec.Targets.MaxTokens})
	if err != nil {
		return 0, err
	}
	err = l.Run(func(rk launch.Rank) error {
		m, err := finetune.LoadModel(rk.Backend, finetune.ModelRef{Dir: dir}, llama.Options{Parallel: rk.Grid})
		if err != nil {
			return err
		}
		defer m.Free()
		sc, err := m.Score(llama.NewWindows(seqs, m.Config.MaxPositionEmbeddings), llama.ScoreOptions{Docs: len(seqs)})
		if err != nil {
			return err
		}
		if l := sc.Mean(); rk.Lead() && !math.IsNaN(l) {
			loss = l
		}
		return nil
	})
	return loss, err
}

// joinInts writes counts as a list: "1, 4, 16, 64".
func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ", ")
}

// evalLauncher is the study's launch for evaluating the checkpoint in
// dir with w's passes, once what each rank will allocate is known to fit
// its device (job.PreflightModel).
func (r *Runner) evalLauncher(dir string, w llama.Work) (*launch.Launcher, error) {
	l, err := launch.New(r.Launch)
	if err != nil {
		return nil, err
	}
	cfg, err := checkpoints.ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	if err := job.PreflightModel(l, cfg, w); err != nil {
		return nil, err
	}
	return l, nil
}

// modelName names a base model in results: its folder, or its preset with
// the shape that was overridden (the report groups arms by it).
func modelName(b Base, cfg *checkpoints.Config) string {
	if b.Model != "" {
		return b.Model
	}
	if b.Hidden == 0 && b.Layers == 0 && b.Intermediate == 0 {
		return b.Preset
	}
	return fmt.Sprintf("%s-h%d-l%d", b.Preset, cfg.HiddenSize, cfg.NumHiddenLayers)
}

func rel(base, path string) string {
	if r, err := filepath.Rel(base, path); err == nil {
		return r
	}
	return path
}
