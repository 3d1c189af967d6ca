package finetune

import (
	"fmt"

	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/engine/llama"
)

// A Sample is a greedy continuation of one of Config.Samples' prompts.
type Sample struct {
	Prompt string `json:"prompt"`
	Text   string `json:"text"` // the new tokens only, decoded without special tokens
}

// prepareSamples tokenizes Config.Samples' prompts with the run's
// tokenizer (the model folder's, BOS added as the tokenizer adds it) when
// the run opens, so that a prompt the model cannot continue stops the run
// before its first step rather than at its first sample.
func (r *Run) prepareSamples(maxPositions int) error {
	s := r.Config.Samples
	tj, ok := r.files[tokenizer.FileName]
	if !ok {
		return fmt.Errorf("finetune: samples: %s has no %s to tokenize the prompts with", r.Config.Model, tokenizer.FileName)
	}
	tok, err := tokenizer.Parse(r.Config.Model, tj, r.files[tokenizer.ConfigFileName])
	if err != nil {
		return fmt.Errorf("finetune: samples: %w", err)
	}
	ids := make([][]int32, len(s.Prompts))
	for i, p := range s.Prompts {
		if ids[i], err = tok.EncodeChecked(p, tokenizer.EncodeOptions{AddSpecial: true}); err != nil {
			return fmt.Errorf("finetune: samples: prompt %d: %w", i+1, err)
		}
		switch {
		case len(ids[i]) == 0:
			return fmt.Errorf("finetune: samples: prompt %d (%q) has no tokens", i+1, p)
		case s.MaxNewTokens > maxPositions-len(ids[i]): // len+max_new_tokens, which can overflow
			return fmt.Errorf("finetune: samples: prompt %d has %d tokens; with max_new_tokens %d that exceeds the model's max_position_embeddings %d",
				i+1, len(ids[i]), s.MaxNewTokens, maxPositions)
		}
	}
	r.sampleTok, r.sampleIDs = tok, ids
	return nil
}

// Sample continues each of Config.Samples' prompts greedily with the
// model as it is now, stopping at EOS or after max_new_tokens. On a grid
// every rank calls it and gets the same samples. It returns nil when the
// run has no samples configured.
func (r *Run) Sample() ([]Sample, error) {
	if r.sampleTok == nil {
		return nil, nil
	}
	tok := r.sampleTok
	opt := llama.GenerateOptions{MaxNewTokens: r.Config.Samples.MaxNewTokens, StopIDs: StopIDs(tok)}
	outs, err := r.Model.Generate(r.sampleIDs, opt)
	if err != nil {
		return nil, fmt.Errorf("finetune: samples: %w", err)
	}
	samples := make([]Sample, len(outs))
	for i, ids := range outs {
		samples[i] = Sample{Prompt: r.Config.Samples.Prompts[i], Text: tok.DecodeSkipSpecial(ids)}
	}
	return samples, nil
}

// StopIDs are the ids that end a generation with tok: its EOS, when it
// has one (nil for a nil tok). Samples, extraction during training and
// every evaluation stop by this one rule.
func StopIDs(tok *tokenizer.Tokenizer) []int32 {
	if tok == nil {
		return nil
	}
	if eos, ok := tok.EOS(); ok {
		return []int32{eos}
	}
	return nil
}
