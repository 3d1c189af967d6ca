package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/internal/units"
)

// maxInitParams bounds `init`, which holds every weight in memory as
// float32 before writing (4 bytes a parameter).
const maxInitParams = 3_000_000_000

type initFlags struct {
	out, tokenizer, preset, config string
	hidden, layers, heads, kvHeads int
	intermediate, headDim          int
	seed                           uint64
	dtype, maxShard                string
	force                          bool
}

func newInitCmd() *cobra.Command {
	var f initFlags
	cmd := &cobra.Command{
		Use:   "init --out DIR --tokenizer PATH [--preset NAME | --config FILE] [shape flags]",
		Short: "Write a randomly initialised Llama checkpoint in HuggingFace layout",
		Long: `init writes a new Llama checkpoint folder: config.json, model.safetensors
(weights normal with std 0.02, RMSNorm weights one, deterministic for a seed)
and the tokenizer files. The vocabulary size and BOS/EOS ids come from the
tokenizer. The shape comes from --preset (default tiny) or --config, and the
shape flags override single fields.`,
		Example: `  memtrain init --out tiny --tokenizer builtin:llama2 --preset tiny --seed 1
  memtrain init --out m --tokenizer ./tokenizer.json --hidden 256 --layers 8 --heads 8 --kv-heads 2 --intermediate 688 --dtype bf16`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runInit(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.out, "out", "", "output checkpoint folder (created; must not hold a checkpoint unless --force)")
	fl.StringVar(&f.tokenizer, "tokenizer", "", tokenizerFlagHelp)
	fl.StringVar(&f.preset, "preset", "", "model shape preset (see 'memtrain inspect --help'); default tiny")
	fl.StringVar(&f.config, "config", "", "a HuggingFace config.json (or checkpoint folder) to take the shape from")
	fl.IntVar(&f.hidden, "hidden", 0, "override hidden_size")
	fl.IntVar(&f.layers, "layers", 0, "override num_hidden_layers")
	fl.IntVar(&f.heads, "heads", 0, "override num_attention_heads")
	fl.IntVar(&f.kvHeads, "kv-heads", 0, "override num_key_value_heads (grouped-query attention)")
	fl.IntVar(&f.intermediate, "intermediate", 0, "override intermediate_size (the MLP width)")
	fl.IntVar(&f.headDim, "head-dim", 0, "override head_dim (default hidden / heads)")
	fl.Uint64Var(&f.seed, "seed", 0, "random seed; the same seed gives the same weights")
	fl.StringVar(&f.dtype, "dtype", "f32", "storage type of the weights: f32 or bf16")
	fl.StringVar(&f.maxShard, "max-shard-size", "5GB", "split the weights into shards above this size (e.g. 500MB, 5GB = 5×10⁹ bytes, 2GiB = 2G = 2³¹ bytes; 0 for one file)")
	fl.BoolVar(&f.force, "force", false, "overwrite a checkpoint already in --out")
	cmd.MarkFlagRequired("out")
	cmd.MarkFlagRequired("tokenizer")
	return cmd
}

func runInit(cmd *cobra.Command, f initFlags) error {
	if f.preset != "" && f.config != "" {
		return errors.New("init: give --preset or --config, not both")
	}
	dtype, err := parseStorageDType(f.dtype)
	if err != nil {
		return err
	}
	maxShard, err := units.ParseBytes(f.maxShard)
	if err != nil {
		return fmt.Errorf("init: --max-shard-size: %w", err)
	}
	if _, err := os.Stat(filepath.Join(f.out, checkpoints.ConfigFile)); err == nil && !f.force {
		return fmt.Errorf("init: %s already holds a checkpoint (use --force to overwrite)", f.out)
	}
	tok, files, err := openTokenizer(f.tokenizer)
	if err != nil {
		return err
	}

	var cfg *checkpoints.Config
	source := ""
	if f.config != "" {
		if cfg, err = checkpoints.ReadConfig(f.config); err != nil {
			return err
		}
		source = f.config
		if cfg.VocabSize < tok.VocabSize() {
			return fmt.Errorf("init: %s: vocab_size %d is smaller than the tokenizer's %d", f.config, cfg.VocabSize, tok.VocabSize())
		}
	} else {
		name := f.preset
		if name == "" {
			name = "tiny"
		}
		p, err := checkpoints.LookupPreset(name)
		if err != nil {
			return fmt.Errorf("init: --preset: %w", err)
		}
		cfg, source = p.Config(), "preset "+name
		cfg.VocabSize = tok.VocabSize()
	}
	shape := checkpoints.Shape{Hidden: f.hidden, Layers: f.layers, Heads: f.heads, KVHeads: f.kvHeads,
		Intermediate: f.intermediate, HeadDim: f.headDim}
	if err := cfg.Reshape(shape); err != nil {
		var se *checkpoints.ShapeError
		if errors.As(err, &se) {
			return fmt.Errorf("init: --%s %d: %s (%s)", shapeFlags[se.Field], se.Value, se.Msg, se.Field)
		}
		return fmt.Errorf("init: %w", err)
	}
	bos, hasBOS := tok.BOS()
	eos, hasEOS := tok.EOS()
	cfg.SetSpecialTokens(bos, hasBOS, eos, hasEOS)
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	params := cfg.Params()
	if params.Total > maxInitParams {
		return fmt.Errorf("init: %s has %s parameters; init holds them in memory as float32 and stops at %s (use `memtrain inspect --preset` to size large models)",
			source, units.FormatCount(params.Total), units.FormatCount(maxInitParams))
	}
	tensors := checkpoints.RandomWeights(cfg, f.seed)
	err = checkpoints.Save(f.out, cfg, tensors, checkpoints.SaveOptions{DType: dtype, MaxShardBytes: maxShard, Files: files})
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %s parameters (%s non-embedding), %d layers, hidden %d, vocab %d, %s, seed %d\n",
		f.out, units.FormatCount(params.Total), units.FormatCount(params.NonEmbedding), cfg.NumHiddenLayers, cfg.HiddenSize, cfg.VocabSize, dtype, f.seed)
	return nil
}

// shapeFlags are init's flags for the config.json keys they override.
var shapeFlags = map[string]string{
	"hidden_size": "hidden", "num_hidden_layers": "layers", "num_attention_heads": "heads", "num_key_value_heads": "kv-heads",
	"intermediate_size": "intermediate", "head_dim": "head-dim",
}

// parseStorageDType accepts the dtypes a checkpoint can be written in.
func parseStorageDType(s string) (checkpoints.DType, error) {
	switch strings.ToLower(s) {
	case "f32", "float32":
		return checkpoints.DTypeF32, nil
	case "bf16", "bfloat16":
		return checkpoints.DTypeBF16, nil
	}
	return 0, fmt.Errorf("--dtype: unsupported %q (want f32 or bf16)", s)
}
