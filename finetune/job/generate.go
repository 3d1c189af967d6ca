package job

import (
	"fmt"
	"slices"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/finetune"
)

// A Decode is greedy decoding of prompts with a model, on a launcher's
// ranks (every rank decodes every prompt, the grid's collectives pairing
// up inside the model).
type Decode struct {
	Model        finetune.ModelRef // a checkpoint folder and an optional adapter (finetune.ResolveAdapted's)
	IDPrompts    [][]int32         // prompts of token ids, decoded first
	Prompts      []string          // text prompts, tokenized with the model's tokenizer
	BOS          bool              // add BOS to the text prompts
	MaxNewTokens int
	StopAtEOS    bool // end a continuation at the model's EOS (kept)
}

// A Generation is one prompt's continuation.
type Generation struct {
	PromptIDs []int32 `json:"prompt_ids"`
	IDs       []int32 `json:"ids"`
	Text      string  `json:"text,omitempty"` // the continuation, decoded (with a tokenizer)
	Prompt    string  `json:"-"`              // the prompt, decoded without its special tokens (with a tokenizer)
	Decoded   bool    `json:"-"`              // the model has a tokenizer: Text and Prompt are set
}

// A NewTokensError is a number of new tokens that does not fit the
// model's positions beside the longest prompt.
type NewTokensError struct {
	Asked, Longest, Positions int
	Model                     string
}

func (e *NewTokensError) Error() string {
	return fmt.Sprintf("%d: want 0 to %d (the new tokens and the longest prompt's %d within %s's max_position_embeddings %d)",
		e.Asked, max(0, e.Positions-e.Longest), e.Longest, e.Model, e.Positions)
}

// Generate decodes d's prompts greedily with a KV cache and returns the
// lead rank's generations (nil on the others) and whether this process
// holds the lead rank. The prompts and their continuations are checked
// to fit the model's positions, and its KV cache the ranks' devices,
// before the model loads.
func Generate(l *launch.Launcher, d Decode) ([]Generation, bool, error) {
	cfg, err := checkpoints.ReadConfig(d.Model.Dir)
	if err != nil {
		return nil, false, err
	}
	longest := 1 // a prompt has a token
	for _, p := range d.IDPrompts {
		longest = max(longest, len(p))
	}
	if maxPos := cfg.MaxPositionEmbeddings; d.MaxNewTokens > maxPos-longest {
		return nil, false, &NewTokensError{Asked: d.MaxNewTokens, Longest: longest, Positions: maxPos, Model: d.Model.Dir}
	}
	// Text prompts are tokenized on the ranks: their length is bounded by
	// their bytes (a token is at least one byte, BOS and a leading space
	// aside).
	for _, p := range d.Prompts {
		longest = max(longest, min(len(p)+4, cfg.MaxPositionEmbeddings-d.MaxNewTokens))
	}
	w := llama.Work{}
	if d.MaxNewTokens > 0 {
		w = llama.Work{Batch: len(d.IDPrompts) + len(d.Prompts), SeqLen: longest, NewTokens: d.MaxNewTokens}
	}
	if err := PreflightModel(l, cfg, w); err != nil {
		return nil, false, fmt.Errorf("%s: %w", d.Model.Dir, err)
	}
	var gens []Generation
	lead := false
	err = l.Run(func(r launch.Rank) error {
		lm, err := finetune.LoadWithTokenizer(r.Backend, d.Model, llama.Options{Parallel: r.Grid}, len(d.Prompts) > 0)
		if err != nil {
			return err
		}
		defer lm.Model.Free()
		g, err := decode(lm, d)
		if r.Lead() {
			gens, lead = g, true
		}
		return err
	})
	return gens, lead, err
}

// decode decodes d's prompts on one rank.
func decode(lm *finetune.Loaded, d Decode) ([]Generation, error) {
	m := lm.Model
	prompts := slices.Clone(d.IDPrompts)
	if len(d.Prompts) > 0 {
		enc, err := lm.Tokenizer.EncodeBatchChecked(d.Prompts, tokenizer.EncodeOptions{AddSpecial: d.BOS}, 0)
		if err != nil {
			return nil, fmt.Errorf("prompt: %w", err)
		}
		prompts = append(prompts, enc...)
	}
	var stop []int32
	if d.StopAtEOS {
		for _, id := range m.Config.EOSTokenIDs {
			stop = append(stop, int32(id))
		}
	}
	outs, err := m.Generate(prompts, llama.GenerateOptions{MaxNewTokens: d.MaxNewTokens, StopIDs: stop})
	if err != nil {
		return nil, err
	}
	if err := finetune.CheckFinite(m, append(slices.Clone(prompts[0]), outs[0]...)); err != nil {
		return nil, fmt.Errorf("%s: %w", lm.Dir, err)
	}
	gens := make([]Generation, len(outs))
	for i, ids := range outs {
		g := Generation{PromptIDs: prompts[i], IDs: ids}
		if ids == nil {
			g.IDs = []int32{}
		}
		if tok := lm.Tokenizer; tok != nil {
			if g.Text, err = tok.DecodeChecked(ids, false); err != nil {
				return nil, fmt.Errorf("output %d: %w", i+1, err)
			}
			g.Prompt, g.Decoded = tok.DecodeSkipSpecial(prompts[i]), true
		}
		gens[i] = g
	}
	return gens, nil
}
