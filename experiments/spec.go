package experiments

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/checkpoints/hub"
	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/goldfish"
	"github.com/memtrain/memtrain/internal/inputfile"
	"github.com/memtrain/memtrain/internal/options"
	"github.com/memtrain/memtrain/internal/units"
	"github.com/memtrain/memtrain/memorization"
)

// A Spec is a memorization study: a base model, target documents with
// held-out controls, the arms to train (standard and goldfish losses, any
// setting overridden per arm), the seeds and the evaluation protocols.
type Spec struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	// Tokenizer tokenizes the targets and initialises preset base models:
	// a tokenizer.json, a folder holding one, or builtin:llama2 /
	// builtin:llama3. Default: the base checkpoint's.
	Tokenizer string  `yaml:"tokenizer"`
	Base      Base    `yaml:"base"`
	Targets   Targets `yaml:"targets"`
	// Train holds fine-tuning settings shared by the arms: the keys of
	// `memtrain finetune --config` except model, data and out.
	Train yaml.Node `yaml:"train"`
	Arms  []Arm     `yaml:"arms"`
	// Seeds train every arm once per seed (the data order; default [1]).
	Seeds []uint64 `yaml:"seeds"`
	Eval  EvalSpec `yaml:"eval"`

	dir  string // the spec file's folder: relative paths start there
	raw  []byte // the spec as given, recorded in the output folder
	file string // the spec's name in messages
}

// Base is the model the arms start from: a checkpoint folder, or a preset
// shape initialised at random and optionally pretrained on a corpus.
type Base struct {
	Model  string `yaml:"model"`
	Preset string `yaml:"preset"`
	// Shape overrides of the preset (0 keeps the preset's).
	Hidden       int    `yaml:"hidden"`
	Layers       int    `yaml:"layers"`
	Heads        int    `yaml:"heads"`
	KVHeads      int    `yaml:"kv_heads"`
	Intermediate int    `yaml:"intermediate"`
	MaxPositions int    `yaml:"max_positions"`
	Seed         uint64 `yaml:"seed"` // initialisation
	// SeedPerRun gives each of the study's seeds a base of its own,
	// initialised with that seed (and pretrained) instead of Seed: the
	// seeds then vary the model's initialisation as well as the data
	// order (which alone varies nothing when a batch is the whole
	// training set).
	SeedPerRun bool `yaml:"seed_per_run"`
	// Pretrain, if set, trains the initialised model on a corpus first.
	Pretrain *Pretrain `yaml:"pretrain"`
}

// forSeed is the base a run of the study's seed starts from: the base
// itself, or with SeedPerRun one initialised with that seed.
func (b Base) forSeed(seed uint64) Base {
	if b.SeedPerRun {
		b.Seed = seed
	}
	return b
}

// shape is the base's overrides of its preset's shape.
func (b Base) shape() checkpoints.Shape {
	return checkpoints.Shape{Hidden: b.Hidden, Layers: b.Layers, Heads: b.Heads, KVHeads: b.KVHeads,
		Intermediate: b.Intermediate, MaxPositions: b.MaxPositions}
}

// baseKeys are the spec's keys for the config.json keys they override.
var baseKeys = map[string]string{
	"hidden_size": "hidden", "num_hidden_layers": "layers", "num_attention_heads": "heads", "num_key_value_heads": "kv_heads",
	"intermediate_size": "intermediate", "max_position_embeddings": "max_positions",
}

// Pretrain is the pretraining of a preset base model.
type Pretrain struct {
	// Data are corpus files or folders (builtin:austen is the bundled Jane
	// Austen corpus); Field is the JSONL field or Parquet column of text.
	Data      []string `yaml:"data"`
	Field     string   `yaml:"field"`
	Documents int      `yaml:"documents"` // the first N documents (0: all)
	SeqLen    int      `yaml:"seq_len"`   // packed sequence length (default 128)
	// Train holds the pretraining's fine-tuning settings.
	Train yaml.Node `yaml:"train"`
}

// Targets chooses the documents to memorize and the held-out controls.
type Targets struct {
	// Data are the files or folders the documents come from
	// (builtin:sotu is the bundled State of the Union addresses).
	Data  []string `yaml:"data"`
	Field string   `yaml:"field"`
	// Count targets are trained on; Holdout controls are never trained on.
	Count   int `yaml:"count"`
	Holdout int `yaml:"holdout"`
	// MinTokens and MaxTokens bound a document's length in tokens, BOS
	// included.
	MinTokens int `yaml:"min_tokens"`
	MaxTokens int `yaml:"max_tokens"`
	// Passages cuts each document into passages of whole sentences of
	// MinTokens to MaxTokens tokens (long documents such as speeches);
	// otherwise whole documents in range are taken.
	Passages bool `yaml:"passages"`
	// Seed orders the candidates before choosing.
	Seed uint64 `yaml:"seed"`
	// Overlap: no chosen document shares a run of this many tokens with
	// another (speeches repeat boilerplate); default 50, 0 keeps 50, a
	// negative value disables the check.
	Overlap int `yaml:"overlap"`
	// Repeat puts each target this many times in the training data
	// (targets seen n times among Filler text); default 1.
	Repeat int `yaml:"repeat"`
	// Canaries gives targets several repetition counts in one study
	// instead of one Repeat: the canary setup.
	Canaries *Canaries `yaml:"canaries"`
	Filler   *Filler   `yaml:"filler"`
}

// Canaries are targets hidden in a Filler corpus, each repeated a
// controlled number of times: PerCount targets for each count of
// Repetitions, so that memorization can be read against the count.
// Targets are dealt to the counts in their (seeded, shuffled) selection
// order: the first PerCount get the smallest count.
type Canaries struct {
	Repetitions []int `yaml:"repetitions"` // e.g. [1, 4, 16, 64]; sorted when read
	PerCount    int   `yaml:"per_count"`
}

// Filler is other text mixed into the training data with the targets.
type Filler struct {
	Data  []string `yaml:"data"`
	Field string   `yaml:"field"`
	// Skip leaves out the first N documents (e.g. those a base model was
	// pretrained on), Documents takes the N after them (0: all).
	Skip      int `yaml:"skip"`
	Documents int `yaml:"documents"`
	// Holdout documents of those, chosen by the targets' seed, are never
	// trained on: the loss on them, against the base model's, is the
	// arms' utility on the filler's domain.
	Holdout int `yaml:"holdout"`
}

// Limits of a canary design: each count and the copies of all canaries
// together (their sum sizes the training data). A plain study's repeat
// and its targets × repeat copies have the same bounds.
const (
	maxCanaryRepetitions = 1 << 20
	maxCanaryCopies      = 1 << 24
)

// Limits of a study's size: its seeds, and its runs (arms × seeds).
const (
	maxSeeds = 10_000
	maxRuns  = 100_000
)

// A bound is a key, its value and the most it may be (the lower bound,
// 0, is the caller's to have checked, with its own message).
type bound struct {
	key   string
	v, hi int
}

// checkBounds checks bounds in order: "targets: count
// 9223372036854775807 (want at most 16777216)".
func checkBounds(section string, bs ...bound) error {
	for _, b := range bs {
		if b.v > b.hi {
			return fmt.Errorf("%s%s %d (want at most %d)", section, b.key, b.v, b.hi)
		}
	}
	return nil
}

// checkCounts bounds the targets' counts and lengths, and the copies of
// a plain study's targets (count × repeat), which size its training data
// as a canary design's do.
func (t *Targets) checkCounts() error {
	if err := checkBounds("targets: ", bound{"count", t.Count, maxCanaryCopies}, bound{"holdout", t.Holdout, maxCanaryCopies},
		bound{"min_tokens", t.MinTokens, checkpoints.MaxPositions}, bound{"max_tokens", t.MaxTokens, checkpoints.MaxPositions},
		bound{"overlap", t.Overlap, checkpoints.MaxPositions}); err != nil {
		return err
	}
	if t.Canaries == nil {
		if copies, ok := units.MulInt(int64(t.Count), int64(t.Repeat)); !ok || copies > maxCanaryCopies {
			return fmt.Errorf("targets: count %d × repeat %d is more than %d documents of training data", t.Count, t.Repeat, maxCanaryCopies)
		}
	}
	return nil
}

// copies is how many times target i (in selection order) is in the
// training data: its canary count, or Repeat.
func (t *Targets) copies(i int) int {
	if c := t.Canaries; c != nil {
		return c.Repetitions[i/c.PerCount]
	}
	return t.Repeat
}

// An Arm is one way of training: its loss and anything it overrides.
type Arm struct {
	Name string `yaml:"name"`
	// Loss is standard or goldfish; Goldfish overrides the goldfish
	// defaults (hash-table, k=4, h=13).
	Loss     finetune.Loss `yaml:"loss"`
	Goldfish yaml.Node     `yaml:"goldfish"`
	// Base overrides fields of the spec's base model (e.g. another preset
	// for a model-size study); Train overrides fine-tuning settings.
	Base  yaml.Node `yaml:"base"`
	Train yaml.Node `yaml:"train"`
}

// EvalSpec is how arms are evaluated.
type EvalSpec struct {
	Protocols []ProtocolSpec `yaml:"protocols"` // default: goldfish, suffix 50
	Batch     int            `yaml:"batch"`     // probes decoded together (default 8)
	Resamples int            `yaml:"resamples"` // bootstrap resamples (default 1000)
	MinK      float64        `yaml:"min_k"`     // min-k% score's k (default 20)
	Seed      uint64         `yaml:"seed"`      // bootstrap seed
}

// ProtocolSpec names an extraction protocol (see memorization.ParseProtocol).
type ProtocolSpec struct {
	Name   string `yaml:"name"`
	Prefix []int  `yaml:"prefix"`
	Suffix int    `yaml:"suffix"`
}

// ReadSpec reads and checks a spec file. Relative paths in it are taken
// from the file's folder.
func ReadSpec(path string) (*Spec, error) {
	b, err := inputfile.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("experiments: %w", err)
	}
	return parseSpec(path, b, filepath.Dir(path))
}

// ParseSpec parses a spec; dir is the folder relative paths start from.
func ParseSpec(b []byte, dir string) (*Spec, error) {
	return parseSpec("spec", b, dir)
}

// parseSpec parses the spec named file (in messages). Its errors name the
// file, and the line and key as written where there is one.
func parseSpec(file string, b []byte, dir string) (*Spec, error) {
	s := Spec{dir: dir, raw: append([]byte(nil), b...), file: file}
	if err := options.Decode(file, b, &s); err != nil {
		return nil, fmt.Errorf("experiments: %w", err)
	}
	if err := s.check(); err != nil {
		// An override's own error names its line: put it first, with
		// the context the check gave (the arm, the section).
		var pe *options.Error
		if errors.As(err, &pe) {
			ctx := strings.TrimSuffix(err.Error(), pe.Error())
			return nil, fmt.Errorf("experiments: %s: %s%s", pe.At(), ctx, pe.Msg)
		}
		return nil, fmt.Errorf("experiments: %s: %w", file, err)
	}
	return &s, nil
}

// yamlOf returns the YAML of a node (nothing for an absent one).
func yamlOf(n *yaml.Node) ([]byte, error) {
	if n == nil || n.Kind == 0 {
		return nil, nil
	}
	return yaml.Marshal(n)
}

// overlay applies a node of the spec onto v, which keeps the fields the
// node does not set; errors name the spec's line and key.
func (s *Spec) overlay(n *yaml.Node, v any) error {
	return options.DecodeNode(s.file, n, v)
}

var armName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.+=-]*$`)

// check validates everything that can be checked without reading data or
// training: so that a bad spec fails before any work starts.
func (s *Spec) check() error {
	if len(s.Arms) == 0 {
		return errors.New("arms: none (want at least one, e.g. {name: standard, loss: standard})")
	}
	if len(s.Seeds) == 0 {
		s.Seeds = []uint64{1}
	}
	if len(s.Seeds) > maxSeeds {
		return fmt.Errorf("seeds: %d of them (want 1 to %d)", len(s.Seeds), maxSeeds)
	}
	if runs, ok := units.MulInt(int64(len(s.Arms)), int64(len(s.Seeds))); !ok || runs > maxRuns {
		return fmt.Errorf("arms and seeds: %d arms × %d seeds (want at most %d runs)", len(s.Arms), len(s.Seeds), maxRuns)
	}
	seedAt := make(map[uint64]int, len(s.Seeds))
	for i, seed := range s.Seeds {
		if j, ok := seedAt[seed]; ok {
			return fmt.Errorf("seeds[%d]: %d given twice (first as seeds[%d])", i, seed, j)
		}
		seedAt[seed] = i
	}
	seen := map[string]bool{}
	for i := range s.Arms {
		a := &s.Arms[i]
		if !armName.MatchString(a.Name) {
			return fmt.Errorf("arms[%d]: name %q (want letters, digits and _.+=- , not empty)", i, a.Name)
		}
		if seen[a.Name] {
			return fmt.Errorf("arms[%d]: name %q used twice", i, a.Name)
		}
		seen[a.Name] = true
		if _, err := s.armConfig(a, 1); err != nil {
			return fmt.Errorf("arms[%d] (%s): %w", i, a.Name, err)
		}
		b, err := s.armBase(a)
		if err != nil {
			return fmt.Errorf("arms[%d] (%s): base: %w", i, a.Name, err)
		}
		if err := s.checkBase(b); err != nil {
			return fmt.Errorf("arms[%d] (%s): base: %w", i, a.Name, err)
		}
	}
	t := &s.Targets
	if err := t.checkCanaries(); err != nil {
		return err
	}
	switch {
	case len(t.Data) == 0:
		return errors.New("targets: data: missing (files or folders of documents, or builtin:sotu)")
	case t.Count <= 0 || t.Holdout < 0:
		return fmt.Errorf("targets: count %d and holdout %d (want count > 0, holdout ≥ 0)", t.Count, t.Holdout)
	case t.MinTokens < 2 || t.MaxTokens < t.MinTokens:
		return fmt.Errorf("targets: min_tokens %d and max_tokens %d (want 2 ≤ min_tokens ≤ max_tokens)", t.MinTokens, t.MaxTokens)
	case t.Repeat < 0 || t.Repeat > maxCanaryRepetitions:
		return fmt.Errorf("targets: repeat %d (want 1 to %d)", t.Repeat, maxCanaryRepetitions)
	}
	if t.Repeat == 0 {
		t.Repeat = 1
	}
	if err := t.checkCounts(); err != nil {
		return err
	}
	if t.Overlap == 0 {
		t.Overlap = 50
	}
	if err := s.checkFiles("targets: data", t.Data); err != nil {
		return err
	}
	if f := t.Filler; f != nil {
		if len(f.Data) == 0 {
			return errors.New("targets: filler: data: missing")
		}
		if f.Skip < 0 || f.Documents < 0 || f.Holdout < 0 {
			return fmt.Errorf("targets: filler: skip %d, documents %d and holdout %d (want ≥ 0)", f.Skip, f.Documents, f.Holdout)
		}
		if err := checkBounds("targets: filler: ", bound{"skip", f.Skip, units.MaxCount}, bound{"documents", f.Documents, units.MaxCount}, bound{"holdout", f.Holdout, units.MaxCount}); err != nil {
			return err
		}
		if f.Documents > 0 && f.Holdout >= f.Documents {
			return fmt.Errorf("targets: filler: holdout %d of %d documents leaves none to train on", f.Holdout, f.Documents)
		}
		if err := s.checkFiles("targets: filler: data", f.Data); err != nil {
			return err
		}
	}
	if len(s.Eval.Protocols) == 0 {
		s.Eval.Protocols = []ProtocolSpec{{Name: "goldfish", Suffix: 50}}
	}
	keys := map[string]bool{}
	for i, ps := range s.Eval.Protocols {
		p, err := ps.protocol()
		if err != nil {
			return fmt.Errorf("eval: protocols[%d]: %w", i, err)
		}
		if p.Name == "chat" {
			return fmt.Errorf("eval: protocols[%d]: %s", i, errChatTargets)
		}
		if keys[p.Key()] {
			return fmt.Errorf("eval: protocols[%d]: %s given twice", i, p.Key())
		}
		keys[p.Key()] = true
	}
	if s.Eval.Batch < 0 || s.Eval.Resamples < 0 {
		return fmt.Errorf("eval: batch %d and resamples %d (want ≥ 0)", s.Eval.Batch, s.Eval.Resamples)
	}
	if err := checkBounds("eval: ", bound{"batch", s.Eval.Batch, units.MaxCount}, bound{"resamples", s.Eval.Resamples, memorization.MaxResamples}); err != nil {
		return err
	}
	if s.Eval.MinK != 0 {
		if err := memorization.CheckMinKPercent(s.Eval.MinK); err != nil {
			return fmt.Errorf("eval: min_k %w", err)
		}
	}
	return nil
}

// checkCanaries checks the canary design, sorts its counts and sets the
// target count it implies.
func (t *Targets) checkCanaries() error {
	c := t.Canaries
	if c == nil {
		return nil
	}
	if len(c.Repetitions) == 0 {
		return errors.New("targets: canaries: repetitions: none (want the copies of each canary, e.g. [1, 4, 16, 64])")
	}
	copies := 0
	for i, n := range c.Repetitions {
		if n < 1 || n > maxCanaryRepetitions {
			return fmt.Errorf("targets: canaries: repetitions[%d]: %d (want 1 to %d)", i, n, maxCanaryRepetitions)
		}
		copies += n
	}
	c.Repetitions = slices.Clone(c.Repetitions)
	slices.Sort(c.Repetitions)
	for i := 1; i < len(c.Repetitions); i++ {
		if c.Repetitions[i] == c.Repetitions[i-1] {
			return fmt.Errorf("targets: canaries: repetitions: %d given twice", c.Repetitions[i])
		}
	}
	if c.PerCount < 1 || c.PerCount > maxCanaryCopies {
		return fmt.Errorf("targets: canaries: per_count %d (want the canaries of each count, 1 to %d)", c.PerCount, maxCanaryCopies)
	}
	if int64(copies)*int64(c.PerCount) > maxCanaryCopies {
		return fmt.Errorf("targets: canaries: %d canaries of each count × %d copies in all is more than %d documents", c.PerCount, copies, maxCanaryCopies)
	}
	n := c.PerCount * len(c.Repetitions)
	switch {
	case t.Count != 0 && t.Count != n:
		return fmt.Errorf("targets: count %d, but canaries make %d (per_count %d × %d counts): leave count out", t.Count, n, c.PerCount, len(c.Repetitions))
	case t.Repeat != 0:
		return errors.New("targets: repeat and canaries: give one (canaries set each target's repetitions)")
	case t.Filler == nil:
		return errors.New("targets: canaries: no filler (canaries are hidden in a filler corpus: targets: filler: {data: …})")
	}
	t.Count = n
	return nil
}

// errChatTargets refuses the chat protocol in a study, whose targets are
// text documents chosen from a corpus, with no conversations to probe.
var errChatTargets = errors.New("chat: a study's targets are text documents, not conversations; the chat protocol measures a chat dataset (memtrain data prepare --chat) with eval memorization --protocol chat or a fine-tuning run's extraction block")

func (ps ProtocolSpec) protocol() (memorization.Protocol, error) {
	return memorization.ParseProtocol(ps.Name, ps.Prefix, ps.Suffix)
}

// Protocols returns the evaluation protocols.
func (s *Spec) Protocols() []memorization.Protocol {
	out := make([]memorization.Protocol, len(s.Eval.Protocols))
	for i, ps := range s.Eval.Protocols {
		out[i], _ = ps.protocol() // checked by check
	}
	return out
}

// baseTrain is the fine-tuning configuration every arm starts from.
func (s *Spec) baseTrain() (finetune.Config, error) {
	cfg := finetune.DefaultConfig()
	if err := s.overlay(&s.Train, &cfg); err != nil {
		return cfg, fmt.Errorf("train: %w", err)
	}
	return cfg, nil
}

// armConfig is the fine-tuning configuration of an arm and seed (model,
// data and out are set by the runner).
func (s *Spec) armConfig(a *Arm, seed uint64) (finetune.Config, error) {
	cfg, err := s.baseTrain()
	if err != nil {
		return cfg, err
	}
	if err := s.overlay(&a.Train, &cfg); err != nil {
		return cfg, fmt.Errorf("train: %w", err)
	}
	if cfg.Model != "" || cfg.Data != "" || cfg.Out != "" {
		return cfg, errors.New("train: model, data and out are set by the experiment (use base: and targets:)")
	}
	if _, err := finetune.ParseLoss(string(a.Loss)); err != nil {
		return cfg, fmt.Errorf("loss: %w", err)
	}
	cfg.Loss = a.Loss
	if err := s.overlay(&a.Goldfish, &cfg.Goldfish); err != nil {
		return cfg, fmt.Errorf("goldfish: %w", err)
	}
	if a.Loss == finetune.Goldfish {
		if err := cfg.Goldfish.Validate(); err != nil {
			return cfg, err
		}
	}
	if e := cfg.Extraction; e.Data != "" || e.NonMembers != "" {
		return cfg, errors.New("train: extraction: data and non_members are set by the experiment (the arm's targets and held-out controls)")
	}
	if cfg.Extraction.Every > 0 && cfg.Extraction.Protocol == "chat" {
		return cfg, fmt.Errorf("train: extraction: protocol %s", errChatTargets)
	}
	cfg.Seed = seed
	cfg.Model, cfg.Data, cfg.Out = "-", "-", "-" // placeholders for Validate
	cfg.Extraction.Data = "-"
	err = cfg.Validate()
	cfg.Model, cfg.Data, cfg.Out = "", "", ""
	cfg.Extraction.Data = ""
	return cfg, err
}

// armBase is the base model of an arm: the spec's, with the arm's
// overrides.
func (s *Spec) armBase(a *Arm) (Base, error) {
	b := s.Base
	if b.Pretrain != nil {
		p := *b.Pretrain
		b.Pretrain = &p
	}
	if err := s.overlay(&a.Base, &b); err != nil {
		return b, err
	}
	return b, nil
}

func (s *Spec) checkBase(b Base) error {
	switch {
	case b.Model == "" && b.Preset == "":
		return errors.New("model or preset: missing (a checkpoint folder, or a preset to initialise)")
	case b.Model != "" && b.Preset != "":
		return errors.New("model and preset: give one")
	case b.Model != "":
		if b.Pretrain != nil {
			return errors.New("pretrain: only a preset base is pretrained")
		}
		if b.SeedPerRun {
			return errors.New("seed_per_run: only a preset base is initialised (a checkpoint has its weights)")
		}
		// That it resolves; the runner verifies its bytes once, when it
		// resolves the models to use (Runner.resolveModels).
		if _, _, err := finetune.ResolvePath(s.modelPath(b.Model)); err != nil {
			return err // "model PATH: why"
		}
		return nil
	}
	if _, err := checkpoints.LookupPreset(b.Preset); err != nil {
		return err
	}
	if s.Tokenizer == "" {
		return errors.New("a preset base needs the spec's tokenizer (e.g. tokenizer: builtin:llama2)")
	}
	for _, v := range []int{b.Hidden, b.Layers, b.Heads, b.KVHeads, b.Intermediate, b.MaxPositions} {
		if v < 0 {
			return errors.New("shape overrides must not be negative")
		}
	}
	if err := b.shape().Check(); err != nil {
		var se *checkpoints.ShapeError
		if errors.As(err, &se) {
			return fmt.Errorf("%s: %d: %s (%s)", baseKeys[se.Field], se.Value, se.Msg, se.Field)
		}
		return err
	}
	if p := b.Pretrain; p != nil {
		if len(p.Data) == 0 {
			return errors.New("pretrain: data: missing")
		}
		if p.SeqLen < 0 || p.Documents < 0 {
			return errors.New("pretrain: seq_len and documents must not be negative")
		}
		if err := checkBounds("pretrain: ", bound{"seq_len", p.SeqLen, checkpoints.MaxPositions}, bound{"documents", p.Documents, units.MaxCount}); err != nil {
			return err
		}
		if err := s.checkFiles("pretrain: data", p.Data); err != nil {
			return err
		}
		cfg := finetune.DefaultConfig()
		if err := s.overlay(&p.Train, &cfg); err != nil {
			return fmt.Errorf("pretrain: train: %w", err)
		}
		cfg.Model, cfg.Data, cfg.Out = "-", "-", "-"
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("pretrain: %w", err)
		}
	}
	return nil
}

// builtinData are the corpora bundled with memtrain, usable as data paths.
var builtinData = map[string]string{"builtin:austen": "austen.jsonl", "builtin:sotu": "sotu.jsonl"}

func (s *Spec) checkFiles(what string, paths []string) error {
	for _, p := range paths {
		if strings.HasPrefix(p, "builtin:") {
			if _, ok := builtinData[p]; !ok {
				return fmt.Errorf("%s: unknown %q (want builtin:austen or builtin:sotu)", what, p)
			}
			continue
		}
		if _, err := os.Stat(s.path(p)); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

// path resolves a path of the spec against its folder.
func (s *Spec) path(p string) string {
	if p == "" || filepath.IsAbs(p) || strings.HasPrefix(p, "builtin:") || s.dir == "" {
		return p
	}
	return filepath.Join(s.dir, p)
}

// modelPath resolves a base model's path against the spec's folder, as
// path does, unless nothing is there and it names a Hugging Face model
// (NAMESPACE/NAME[@REVISION]), which finetune.ResolvePath finds in the
// local cache.
func (s *Spec) modelPath(p string) string {
	joined := s.path(p)
	if _, err := os.Stat(joined); err != nil {
		if _, _, ok := hub.ParseModelRef(p); ok {
			return p
		}
	}
	return joined
}

// goldfishOf describes an arm's goldfish loss for results.
func goldfishOf(cfg finetune.Config) (k int, strategy string, h int) {
	if cfg.Loss != finetune.Goldfish {
		return 0, "", 0
	}
	g := cfg.Goldfish
	if g.Strategy == goldfish.Static {
		return g.K, g.Strategy.String(), 0
	}
	return g.K, g.Strategy.String(), g.H
}
