package finetune

import (
	"errors"
	"fmt"

	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/engine/llama"
)

// A Sample is a greedy continuation of one of Config.Samples' prompts.
type Sample struct {
	Prompt string `json:"prompt"`
	Text   string `json:"text"` // the new tokens only, decoded without special tokens
}

// Sample continues each of Config.Samples' prompts greedily with the
// model as it is now: the prompts are tokenized with the run's tokenizer
// (the model folder's, BOS added as the tokenizer adds it), and decoding
// stops at EOS or after max_new_tokens. On a grid every rank calls it and
// gets the same samples.
func (r *Run) Sample() ([]Sample, error) {
	s := r.Config.Samples
	if len(s.Prompts) == 0 {
		return nil, nil
	}
	if r.sampleTok == nil {
		tj, ok := r.files[tokenizer.FileName]
		if !ok {
			return nil, errors.New("finetune: samples: the model folder has no " + tokenizer.FileName + " to tokenize the prompts with")
		}
		tok, err := tokenizer.Parse(r.Config.Model, tj, r.files[tokenizer.ConfigFileName])
		if err != nil {
			return nil, fmt.Errorf("finetune: samples: %w", err)
		}
		r.sampleTok = tok
	}
	tok := r.sampleTok
	prompts := make([][]int32, len(s.Prompts))
	for i, p := range s.Prompts {
		if prompts[i] = tok.Encode(p, tokenizer.EncodeOptions{AddSpecial: true}); len(prompts[i]) == 0 {
			return nil, fmt.Errorf("finetune: samples: prompt %d (%q) has no tokens", i+1, p)
		}
	}
	opt := llama.GenerateOptions{MaxNewTokens: s.MaxNewTokens}
	if eos, ok := tok.EOS(); ok {
		opt.StopIDs = []int32{eos}
	}
	outs, err := r.Model.Generate(prompts, opt)
	if err != nil {
		return nil, fmt.Errorf("finetune: samples: %w", err)
	}
	samples := make([]Sample, len(outs))
	for i, ids := range outs {
		samples[i] = Sample{Prompt: s.Prompts[i], Text: tok.DecodeSkipSpecial(ids)}
	}
	return samples, nil
}
