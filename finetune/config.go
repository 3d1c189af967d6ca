package finetune

import (
	"os"
	"path/filepath"

	"errors"
	"fmt"
	"github.com/memtrain/memtrain/internal/inputfile"
	"math"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/goldfish"
	"github.com/memtrain/memtrain/internal/options"
	"github.com/memtrain/memtrain/internal/units"
)

//go:generate go run ../scripts/optionsdoc -readme ../README.md

// Config is a fine-tuning run, declared once (internal/options): each
// field's YAML key, default and help are its tags, and the command's
// flags, the strict YAML decoder, the resume check (resume:"same") and
// the README's table of keys are derived from them. Adding an option is
// one field here and its use.
type Config struct {
	Model string `yaml:"model" resume:"same" help:"base checkpoint folder (or a run folder, or its checkpoints/latest: its latest checkpoint)"`
	Data  string `yaml:"data" resume:"same" help:"dataset folder made by memtrain data prepare with the model's tokenizer"`
	Out   string `yaml:"out" help:"run folder: config.yaml, metrics.jsonl, checkpoints/"`

	Loss     Loss            `yaml:"loss" default:"standard" resume:"same" help:"standard or goldfish"`
	Goldfish goldfish.Config `yaml:"goldfish"`

	Optimizer OptimizerConfig `yaml:"optimizer"`
	Zero      int             `yaml:"zero" help:"ZeRO stage over the data-parallel ranks: 0 none; 1 shards AdamW's moments, each data rank updating its 1/data of every tensor and all-gathering the updated weights (bit for bit stage 0's steps; checkpoints and resume on any grid as without); 2 (sharded gradients) is not implemented"`
	Master    string          `yaml:"master" default:"fp32" help:"the float32 master weights of precision bf16: fp32, or split: each held as its bf16 copy (rounded to nearest, ties away from zero) and a 16-bit residual, exactly (4 bytes a parameter for master and copy instead of 6; CPU backend, AdamW, full fine-tuning)"`
	Schedule  Schedule        `yaml:"schedule"`

	BatchSize  int     `yaml:"batch_size" default:"8" resume:"same" help:"sequences per optimizer step (the global batch)"`
	MicroBatch int     `yaml:"micro_batch" default:"4" help:"sequences per forward pass, over the whole grid (each data×Z rank takes micro_batch/(data·Z)); gradients accumulate over batch_size/micro_batch passes"`
	Epochs     int     `yaml:"epochs" default:"1" help:"passes over the training split"`
	MaxSteps   int     `yaml:"max_steps" resume:"same" help:"optimizer steps (overrides epochs when > 0)"`
	Clip       float64 `yaml:"clip" default:"1" help:"clip the global gradient norm to this (0: off)"`
	EvalEvery  int     `yaml:"eval_every" help:"held-out loss every N steps and at the end (0: never)"`
	EvalBatch  int     `yaml:"eval_batch" help:"sequences per held-out forward pass, over the whole grid (0: micro_batch); no gradients are kept, so it can exceed micro_batch"`
	SaveEvery  int     `yaml:"save_every" help:"save a checkpoint every N steps (and always at the end)"`
	Keep       int     `yaml:"keep" default:"2" help:"checkpoints to keep (0: all)"`
	SaveAsync  bool    `yaml:"save_async" help:"write checkpoints in the background: the step's weights and moments are copied to host memory (a copy of each rank's shards, reused) and written while training goes on; the last one and one at a stop are written at once"`
	Seed       uint64  `yaml:"seed" resume:"same" help:"data order seed"`
	Precision  string  `yaml:"precision" default:"f32" help:"f32, or bf16: mixed precision (bf16 activations and weight copies; float32 master weights, gradients, moments and loss), on every grid"`
	SaveDType  string  `yaml:"save_dtype" default:"f32" help:"weights of the finished run's HF export (RUN/final): f32 or bf16; training checkpoints keep float32"`

	// Recompute is the activations the backward pass recomputes.
	Recompute Recompute `yaml:"recompute" default:"none" help:"activations recomputed in the backward pass for less memory, bit for bit: none; selective (the norms' outputs and SwiGLU's, no GEMM again); or full (every layer's but its input: one more forward); true and false mean full and none"`

	LoRA       LoRA       `yaml:"lora"`
	Divergence Divergence `yaml:"divergence"`
	Samples    Samples    `yaml:"samples"`
	Extraction Extraction `yaml:"extraction"`
}

// LoRA trains low-rank adapters on a frozen base instead of every
// weight (engine/llama's lora.go): rank 0 is full fine-tuning. The
// run's checkpoints hold the adapters and their moments; RUN/final is a
// PEFT adapter folder, which memtrain merge folds into the base.
type LoRA struct {
	Rank      int     `yaml:"rank" resume:"same" help:"LoRA rank r: train adapters of this rank on a frozen base (0: full fine-tuning)"`
	Alpha     float64 `yaml:"alpha" resume:"same" help:"LoRA alpha: the adapters' product is scaled by alpha/r (0: 2·rank)"`
	Dropout   float64 `yaml:"dropout" resume:"same" help:"dropout probability on the adapters' inputs"`
	RSLoRA    bool    `yaml:"rslora" resume:"same" help:"rank-stabilised scaling, alpha/√r instead of alpha/r"`
	Targets   string  `yaml:"targets" default:"q_proj,k_proj,v_proj,o_proj" resume:"same" help:"projections to adapt, comma-separated: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, or all-linear"`
	Init      string  `yaml:"init" resume:"same" help:"start from this PEFT adapter folder (its rank, alpha and targets must match) instead of PEFT's initialisation"`
	BaseDType string  `yaml:"base_dtype" default:"auto" help:"the frozen base's dtype in memory: auto (the checkpoint's: bf16 stays bf16; bf16 with precision bf16), f32 (not with precision bf16) or bf16"`
}

// Adapter is the PEFT adapter configuration the block describes on the
// base model (for base_model_name_or_path), nil for full fine-tuning.
func (l LoRA) Adapter(base string) (*checkpoints.AdapterConfig, error) {
	if l.Rank == 0 {
		return nil, nil
	}
	targets := []string{}
	list, err := units.SplitList(l.Targets)
	if err != nil {
		return nil, fmt.Errorf("finetune: lora.targets: %w", err)
	}
	for _, t := range list {
		if t == "all-linear" {
			targets = append(targets, checkpoints.LoRAModules()...)
			continue
		}
		targets = append(targets, t)
	}
	alpha := l.Alpha
	if alpha == 0 {
		alpha = 2 * float64(l.Rank)
	}
	a := &checkpoints.AdapterConfig{PEFTType: "LORA", TaskType: "CAUSAL_LM", R: l.Rank, LoRAAlpha: alpha, LoRADropout: l.Dropout,
		TargetModules: targets, Bias: "none", UseRSLoRA: l.RSLoRA, BaseModelNameOrPath: base, InitLoRAWeights: true}
	if err := a.Validate(); err != nil {
		return nil, fmt.Errorf("finetune: lora: %w", err)
	}
	return a, nil
}

// baseDType is the dtype the frozen base is held in for a checkpoint
// stored as stored and activations of dtype act: bf16 activations
// multiply the base in bf16, so it is held in bf16 then.
func (l LoRA) baseDType(stored checkpoints.DType, act engine.DType) (engine.DType, error) {
	switch l.BaseDType {
	case "auto", "":
		if stored == checkpoints.DTypeBF16 || act == engine.BF16 {
			return engine.BF16, nil
		}
		return engine.F32, nil
	case "f32":
		if act == engine.BF16 {
			return 0, errors.New("finetune: lora.base_dtype f32 with precision bf16: bf16 activations multiply the frozen base in bf16 (want auto or bf16)")
		}
		return engine.F32, nil
	case "bf16":
		return engine.BF16, nil
	}
	return 0, fmt.Errorf("finetune: lora.base_dtype: %q (want auto, f32 or bf16)", l.BaseDType)
}

// Extraction is greedy extraction measured during training
// (extraction.go): every N steps and at the last (and, with FirstPass,
// at the end of the first epoch), the probes of the
// members (and non-members) are decoded with the KV cache
// (memorization.Extraction, the driver of eval memorization) and their
// exact and token match written to the step's metrics line. Its keys
// but first_pass are eval memorization's flags.
type Extraction struct {
	Every      int    `yaml:"every" help:"measure greedy extraction of extraction.data every N steps and at the end (0: never)"`
	FirstPass  bool   `yaml:"first_pass" help:"also measure at the end of the first pass over the training data (the one-pass extraction of a model-size study)"`
	Data       string `yaml:"data" help:"members: a dataset folder (its train split; its holdout split the non-members) or input files of member documents, comma-separated"`
	NonMembers string `yaml:"non_members" help:"input files of held-out documents, comma-separated (with input files as extraction.data)"`
	Protocol   string `yaml:"protocol" default:"goldfish" help:"goldfish, pythia, carlini, custom or chat (a chat dataset's conversations: a probe per assistant answer)"`
	Prefix     string `yaml:"prefix" help:"prefix length(s) in tokens, comma-separated (pythia, carlini, custom; chat: the answer's tokens in the prompt, default 0)"`
	Suffix     int    `yaml:"suffix" help:"suffix length in tokens (0: the protocol's, 50, pythia 32; chat's at most the rest of the answer)"`
	Limit      int    `yaml:"limit" help:"at most this many members and as many non-members (0: all)"`
	Batch      int    `yaml:"batch" default:"8" help:"probes decoded together"`
}

// Samples are greedy generations from fixed prompts during training
// (samples.go), printed and written to the metrics line of their step.
// Held-out evaluation keeps its own key, eval_every: this block is apart
// from it so that no existing configuration or spec changes.
type Samples struct {
	Every        int      `yaml:"every" help:"generate from samples.prompts (a list, in the file) every N steps and at the end (0: never)"`
	Prompts      []string `yaml:"prompts"`
	MaxNewTokens int      `yaml:"max_new_tokens" default:"32" help:"new tokens a sample generates at most"`
}

// Divergence is when a finite loss stops the run (divergence.go): when it
// is both over factor × the median of the last window steps' losses and
// more than margin nats above that median. Either test alone would
// misfire: the relative one on a memorization run whose loss near 0
// doubles, the absolute one on a noisy large loss.
type Divergence struct {
	Factor float64 `yaml:"factor" default:"4" help:"stop the run when a step's loss is over factor × the median of the last window steps' losses and over it by more than margin (0: never)"`
	Margin float64 `yaml:"margin" default:"1" help:"nats a loss must be above that median to stop the run (so that a loss near 0 does not); above median + margin it is out of band, and no checkpoint saved since it left the band is the last good one"`
	Window int     `yaml:"window" default:"50" help:"steps of the running median"`
}

// Loss is the training loss.
type Loss string

// The losses.
const (
	Standard Loss = "standard" // cross-entropy on every target
	Goldfish Loss = "goldfish" // cross-entropy on the targets the goldfish mask keeps
)

// ParseLoss reads a loss name.
func ParseLoss(s string) (Loss, error) {
	switch l := Loss(s); l {
	case Standard, Goldfish:
		return l, nil
	}
	return "", fmt.Errorf("unknown loss %q (want standard or goldfish)", s)
}

func (l Loss) String() string               { return string(l) }
func (l Loss) MarshalText() ([]byte, error) { return []byte(l), nil }
func (l *Loss) UnmarshalText(b []byte) error {
	v, err := ParseLoss(string(b))
	if err == nil {
		*l = v
	}
	return err
}

// Recompute is the recompute key: which activations the backward pass
// recomputes (llama.Recompute). It was a switch: true and false still
// mean full and none, and the flag alone (--recompute) full.
type Recompute llama.Recompute

// The recomputation modes.
const (
	RecomputeNone      = Recompute(llama.RecomputeNone)
	RecomputeSelective = Recompute(llama.RecomputeSelective)
	RecomputeFull      = Recompute(llama.RecomputeFull)
)

func (r Recompute) String() string               { return llama.Recompute(r).String() }
func (r Recompute) MarshalText() ([]byte, error) { return llama.Recompute(r).MarshalText() }
func (r *Recompute) UnmarshalText(b []byte) error {
	switch string(b) {
	case "true":
		*r = RecomputeFull
		return nil
	case "false":
		*r = RecomputeNone
		return nil
	}
	v, err := llama.ParseRecompute(string(b))
	if err != nil {
		return fmt.Errorf("recompute %q: want none, selective or full (or true, false)", b)
	}
	*r = Recompute(v)
	return nil
}

// NoOptValue is the value of the flag given alone: --recompute is full
// recomputation, as when the key was a switch.
func (r Recompute) NoOptValue() string { return "full" }

// DefaultConfig is the configuration flags and files start from.
func DefaultConfig() Config {
	var c Config
	options.SetDefaults(&c)
	return c
}

// Validate checks the configuration on its own (the data and model are
// checked when the run opens them).
func (c *Config) Validate() error {
	if _, err := ParseLoss(string(c.Loss)); err != nil {
		return fmt.Errorf("finetune: loss: %w", err)
	}
	// Every float finite (clip, the optimizer's, the schedule's), no count
	// or step negative (a negative max_steps is not "none").
	if err := options.CheckNumbers(c); err != nil {
		return fmt.Errorf("finetune: %w", err)
	}
	switch {
	case c.Model == "":
		return errors.New("finetune: model: missing (a checkpoint folder)")
	case c.Data == "":
		return errors.New("finetune: data: missing (a dataset folder from memtrain data prepare)")
	case c.Out == "":
		return errors.New("finetune: out: missing (the run folder)")
	case c.BatchSize <= 0 || c.MicroBatch <= 0:
		return fmt.Errorf("finetune: batch_size %d and micro_batch %d must be positive", c.BatchSize, c.MicroBatch)
	case c.BatchSize%c.MicroBatch != 0:
		return fmt.Errorf("finetune: micro_batch %d does not divide batch_size %d: set micro_batch to a divisor of it, such as %d",
			c.MicroBatch, c.BatchSize, largestDivisor(c.BatchSize, c.MicroBatch))
	case c.Epochs <= 0 && c.MaxSteps <= 0:
		return errors.New("finetune: epochs or max_steps must be positive")
	case c.Clip < 0 || c.EvalEvery < 0 || c.EvalBatch < 0 || c.SaveEvery < 0 || c.Keep < 0:
		return errors.New("finetune: clip, eval_every, eval_batch, save_every and keep must not be negative")
	case c.SaveDType != "f32" && c.SaveDType != "bf16":
		return fmt.Errorf("finetune: save_dtype: %q (want f32 or bf16)", c.SaveDType)
	}
	if _, err := c.activations(); err != nil {
		return err
	}
	if d := c.Divergence; d.Factor != 0 && (!(d.Factor >= 1) || math.IsInf(d.Factor, 0) || !(d.Margin >= 0) || math.IsInf(d.Margin, 0) || d.Window < 1) {
		return fmt.Errorf("finetune: divergence: factor %v, margin %v, window %d (want factor ≥ 1, or 0 for off; margin ≥ 0; window ≥ 1)", d.Factor, d.Margin, d.Window)
	}
	if n := c.Samples.MaxNewTokens; n > checkpoints.MaxPositions {
		return fmt.Errorf("finetune: samples.max_new_tokens: %d (want 0 to %d: no model has more positions)", n, checkpoints.MaxPositions)
	}
	if c.Samples.Every > 0 && len(c.Samples.Prompts) == 0 {
		return errors.New("finetune: samples: every is set but prompts is empty (a list of prompt texts)")
	}
	for i, p := range c.Samples.Prompts {
		if p == "" {
			return fmt.Errorf("finetune: samples: prompt %d is empty", i+1)
		}
	}
	if err := c.Extraction.validate(); err != nil {
		return err
	}
	if c.LoRA.Rank < 0 {
		return fmt.Errorf("finetune: lora.rank: %d (want a rank ≥ 1, or 0 for full fine-tuning)", c.LoRA.Rank)
	}
	if _, err := c.LoRA.Adapter(""); err != nil {
		return err
	}
	act := engine.F32 // the lora block's base_dtype is checked against the precision it trains at
	if c.LoRA.Rank > 0 {
		act, _ = c.activations() // checked above
	}
	if _, err := c.LoRA.baseDType(checkpoints.DTypeF32, act); err != nil {
		return err
	}
	if c.LoRA.Rank == 0 && c.LoRA.Init != "" {
		return errors.New("finetune: lora.init: set, but lora.rank is 0 (full fine-tuning has no adapter to start from)")
	}
	if c.Loss == Goldfish {
		if err := c.Goldfish.Validate(); err != nil {
			return err
		}
	}
	if err := c.Optimizer.Validate(); err != nil {
		return err
	}
	switch {
	case c.Zero == 2:
		return errors.New("finetune: zero: 2 (gradients sharded over the data ranks) is not implemented; zero: 1 shards the optimizer's moments")
	case c.Zero < 0 || c.Zero > 2:
		return fmt.Errorf("finetune: zero: %d (want 0 or 1)", c.Zero)
	case c.Zero == 1 && c.Optimizer.Name != "adamw":
		return fmt.Errorf("finetune: zero: 1 shards AdamW's moments; optimizer.name %s has none", c.Optimizer.Name)
	case c.Zero == 1 && c.Optimizer.Moments == "int8":
		return errors.New("finetune: zero: 1 does not shard 8-bit moments (optimizer.moments int8): its chunks would cut their blocks")
	}
	if err := c.checkMaster(); err != nil {
		return err
	}
	if err := c.checkFused(); err != nil {
		return err
	}
	s := c.Schedule
	if s.Total == 0 {
		s.Total = s.Warmup + 1 // the real total is set once the data is open
	}
	return s.Validate()
}

// checkMaster checks the master key against the precision, the adapters
// and the optimizer (llama.Options.SplitMaster's conditions but the
// backend's, which the model checks).
func (c *Config) checkMaster() error {
	switch {
	case c.Master == "fp32" || c.Master == "":
		return nil
	case c.Master != "split":
		return fmt.Errorf("finetune: master: %q (want fp32 or split)", c.Master)
	case !c.mixed():
		return fmt.Errorf("finetune: master: split splits the float32 master of a bf16 copy; precision is %s", c.Precision)
	case c.LoRA.Rank > 0:
		return errors.New("finetune: master: split is for full fine-tuning (adapters' masters are small)")
	case c.Optimizer.Name != "adamw":
		return fmt.Errorf("finetune: master: split is updated by AdamW's fused step; optimizer.name is %s", c.Optimizer.Name)
	}
	return nil
}

// checkFused checks optimizer.fused against the batch, the adapters and
// ZeRO (llama.Options.FusedOptimizer's conditions, and TrainStep's).
func (c *Config) checkFused() error {
	switch {
	case !c.Optimizer.Fused:
		return nil
	case c.BatchSize != c.MicroBatch:
		return fmt.Errorf("finetune: optimizer.fused: true takes one micro-batch a step; batch_size %d and micro_batch %d (want them equal: every gradient would be needed whole until the last micro-batch)", c.BatchSize, c.MicroBatch)
	case c.LoRA.Rank > 0:
		return errors.New("finetune: optimizer.fused: true is for full fine-tuning (adapters' gradients are small); lora.rank is set")
	case c.Zero != 0:
		return fmt.Errorf("finetune: optimizer.fused: true does not shard the moments over the data ranks; zero is %d (want 0)", c.Zero)
	}
	return nil
}

// mixed reports whether the run is in mixed precision (bf16 activations).
func (c *Config) mixed() bool {
	act, err := c.activations()
	return err == nil && act == engine.BF16
}

// resumeHash identifies the settings a resumed run must share with the run
// it continues (those tagged resume:"same": the data order and the model
// must not change under it).
func (c *Config) resumeHash() string { return options.Digest(c) }

// ReadConfig is the configuration a run starts from: the defaults, then
// the YAML file, or, without one, the configuration of the run that
// resume names (its config.yaml: resuming a run alone continues it as it
// was configured), with the run's folder as out (always: the out a
// config.yaml recorded is where the run was, not where it is). Errors
// name the file,
// line and key.
func ReadConfig(file, resume string) (Config, error) {
	cfg := DefaultConfig()
	runDir := ""
	if resume != "" {
		runDir = RunFolder(resume)
		if p := filepath.Join(runDir, ConfigFile); file == "" {
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				file = p
			}
		}
	}
	if file != "" {
		raw, err := inputfile.ReadFile(file)
		if err != nil {
			return cfg, fmt.Errorf("finetune: %w", err)
		}
		if err := options.Decode(file, raw, &cfg); err != nil {
			return cfg, fmt.Errorf("finetune: %w", err)
		}
	}
	if resume != "" {
		// A resumed run stays in the folder the user named, whatever
		// out its config.yaml recorded: a copied or moved run continues
		// where it is, never in the folder it was copied from.
		cfg.Out = runDir
	}
	return cfg, nil
}

// activations is the model's activation dtype for the precision key.
func (c *Config) activations() (engine.DType, error) {
	p, err := engine.ParsePrecision(c.Precision)
	if err != nil {
		return engine.F32, fmt.Errorf("finetune: precision: %w", err)
	}
	return p.Activations(), nil
}

// largestDivisor is the largest divisor of n that is at most limit (1 at
// least), the micro-batch to suggest for a batch of n.
func largestDivisor(n, limit int) int {
	for d := min(n, limit); d > 1; d-- {
		if n%d == 0 {
			return d
		}
	}
	return 1
}
