package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/internal/options"
	"github.com/memtrain/memtrain/internal/units"
)

type generateFlags struct {
	model     string
	adapter   string
	prompts   []string
	promptIDs []string
	maxNew    int
	json      bool
	bos       bool
	stopAtEOS bool
	download  bool
	engine    engineFlags
	parallel  parallelFlags
}

// generation is one prompt's result in `generate --json`.
type generation struct {
	PromptIDs []int32 `json:"prompt_ids"`
	IDs       []int32 `json:"ids"`
	Text      string  `json:"text,omitempty"`
}

func newGenerateCmd() *cobra.Command {
	var f generateFlags
	cmd := &cobra.Command{
		Use:   "generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [--max-new-tokens N]",
		Short: "Continue prompts greedily with a KV cache",
		Long: `generate continues each prompt with the most likely token at every step (the
lowest id on ties), all prompts in one batch whatever their lengths. Repeat
--prompt or --prompt-ids for several prompts. Text prompts are tokenized with
the checkpoint's tokenizer (BOS added unless --bos=false). A continuation ends
at the model's EOS (kept) unless --stop-at-eos=false. With --parallel the model
is split over a grid of in-process ranks (every rank decodes every prompt).`,
		Example: `  memtrain generate --model ./tiny --prompt "It is a truth universally acknowledged" --max-new-tokens 20
  memtrain generate --model ./tiny --prompt-ids 1,450,3186 --prompt-ids 1,306 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runGenerate(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "checkpoint folder, run folder (its latest checkpoint) or RUN/checkpoints/latest")
	fl.StringVar(&f.adapter, "adapter", "", "a LoRA adapter folder (PEFT format, e.g. a LoRA run's RUN/final) to apply to the model")
	fl.StringArrayVar(&f.prompts, "prompt", nil, "prompt text (repeatable)")
	fl.StringArrayVar(&f.promptIDs, "prompt-ids", nil, "prompt as comma-separated token ids (repeatable)")
	options.IntRange(fl, &f.maxNew, "max-new-tokens", 32, 0, checkpoints.MaxPositions, "", "tokens to generate per prompt")
	fl.BoolVar(&f.json, "json", false, "print one JSON line per prompt: prompt_ids, ids, text")
	fl.BoolVar(&f.bos, "bos", true, "add BOS when tokenizing a text prompt")
	fl.BoolVar(&f.download, "download", false, "download a Hub model (--model NAMESPACE/NAME[@REVISION]) missing from the cache")
	fl.BoolVar(&f.stopAtEOS, "stop-at-eos", true, "end a continuation at the model's EOS token")
	f.engine.register(fl)
	f.parallel.register(fl)
	cmd.MarkFlagRequired("model")
	return cmd
}

// parseIDs reads a --prompt-ids list: token ids, comma-separated.
func parseIDs(s string) ([]int32, error) {
	ns, err := units.ParseInts(s, 0, math.MaxInt32)
	if err != nil {
		return nil, fmt.Errorf("--prompt-ids: %w", err)
	}
	ids := make([]int32, len(ns))
	for i, n := range ns {
		ids[i] = int32(n)
	}
	return ids, nil
}

func runGenerate(cmd *cobra.Command, f generateFlags) error {
	if len(f.prompts)+len(f.promptIDs) == 0 {
		return errors.New("generate: give --prompt or --prompt-ids")
	}
	// The id prompts are read before anything loads.
	var idPrompts [][]int32
	for _, s := range f.promptIDs {
		ids, err := parseIDs(s)
		if err != nil {
			return fmt.Errorf("generate: %w", err)
		}
		idPrompts = append(idPrompts, ids)
	}
	if err := fetchModel(cmd, f.download, f.model); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	l, ref, err := launcher(cmd.ErrOrStderr(), f.engine, f.parallel, f.model, f.adapter)
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	f.model, f.adapter = ref.Dir, ref.Adapter
	// The prompts and their continuations fit the model's positions, and
	// its KV cache the device, before it loads. Text prompts are tokenized
	// on the ranks: their length is bounded by their bytes (a token is
	// at least one byte, BOS and a leading space aside).
	cfg, err := checkpoints.ReadConfig(f.model)
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	longest := 1 // a prompt has a token
	for _, p := range idPrompts {
		longest = max(longest, len(p))
	}
	if maxPos := cfg.MaxPositionEmbeddings; f.maxNew > maxPos-longest {
		return fmt.Errorf("generate: --max-new-tokens %d: want 0 to %d (the new tokens and the longest prompt's %d within %s's max_position_embeddings %d)",
			f.maxNew, max(0, maxPos-longest), longest, f.model, maxPos)
	}
	for _, p := range f.prompts {
		longest = max(longest, min(len(p)+4, cfg.MaxPositionEmbeddings-f.maxNew))
	}
	w := llama.Work{}
	if f.maxNew > 0 {
		w = llama.Work{Batch: len(idPrompts) + len(f.prompts), SeqLen: longest, NewTokens: f.maxNew}
	}
	if _, err := modelPreflight(l, f.model, w); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	return l.Run(func(r launch.Rank) error {
		lm, err := finetune.LoadWithTokenizer(r.Backend, finetune.ModelRef{Dir: f.model, Adapter: f.adapter}, llama.Options{Parallel: r.Grid}, len(f.prompts) > 0)
		if err != nil {
			return err
		}
		defer lm.Model.Free()
		return generate(cmd, f, idPrompts, lm)
	})
}

// generate decodes the prompts (idPrompts, then the text prompts of f)
// on one rank, or on one rank of a grid, where every rank decodes them all
// and rank 0 prints.
func generate(cmd *cobra.Command, f generateFlags, idPrompts [][]int32, lm *finetune.Loaded) error {
	m := lm.Model
	prompts := slices.Clone(idPrompts)
	if len(f.prompts) > 0 {
		enc, err := lm.Tokenizer.EncodeBatchChecked(f.prompts, tokenizer.EncodeOptions{AddSpecial: f.bos}, 0)
		if err != nil {
			return fmt.Errorf("generate: prompt: %w", err)
		}
		prompts = append(prompts, enc...)
	}
	var stop []int32
	if f.stopAtEOS {
		for _, id := range m.Config.EOSTokenIDs {
			stop = append(stop, int32(id))
		}
	}
	outs, err := m.Generate(prompts, llama.GenerateOptions{MaxNewTokens: f.maxNew, StopIDs: stop})
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	if err := finetune.CheckFinite(m, append(slices.Clone(prompts[0]), outs[0]...)); err != nil {
		return fmt.Errorf("generate: %s: %w", lm.Dir, err)
	}
	if g := m.Grid(); g != nil && g.Rank() != 0 {
		return nil
	}
	w := cmd.OutOrStdout()
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for i, ids := range outs {
		g := generation{PromptIDs: prompts[i], IDs: ids}
		if ids == nil {
			g.IDs = []int32{}
		}
		if lm.Tokenizer != nil {
			var err error
			if g.Text, err = lm.Tokenizer.DecodeChecked(ids, false); err != nil {
				return fmt.Errorf("generate: output %d: %w", i+1, err)
			}
		}
		if f.json {
			if err := enc.Encode(g); err != nil {
				return err
			}
			continue
		}
		if lm.Tokenizer != nil {
			fmt.Fprintf(w, "%s\u2192%s\n", lm.Tokenizer.DecodeSkipSpecial(prompts[i]), g.Text)
		} else {
			fmt.Fprintf(w, "%v -> %v\n", prompts[i], ids)
		}
	}
	return nil
}
