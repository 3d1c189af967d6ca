package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/finetune/job"
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
	downloadFlag(fl, &f.download)
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
	gens, lead, err := job.Generate(l, job.Decode{Model: ref, IDPrompts: idPrompts, Prompts: f.prompts, BOS: f.bos, MaxNewTokens: f.maxNew, StopAtEOS: f.stopAtEOS})
	if err != nil {
		if _, ok := err.(*job.NewTokensError); ok {
			return fmt.Errorf("generate: --max-new-tokens %w", err)
		}
		return fmt.Errorf("generate: %w", err)
	}
	if !lead {
		return nil // under mpirun, the process of rank 0 prints
	}
	w := cmd.OutOrStdout()
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, g := range gens {
		switch {
		case f.json:
			if err := enc.Encode(g); err != nil {
				return err
			}
		case g.Decoded:
			fmt.Fprintf(w, "%s\u2192%s\n", g.Prompt, g.Text)
		default:
			fmt.Fprintf(w, "%v -> %v\n", g.PromptIDs, g.IDs)
		}
	}
	return nil
}
