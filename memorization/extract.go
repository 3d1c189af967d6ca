package memorization

import (
	"fmt"

	"github.com/memtrain/memtrain/engine/llama"
)

// Result is one probe's outcome.
type Result struct {
	Doc         int     `json:"doc"`
	K           int     `json:"prefix_len"`
	Pred        []int32 `json:"pred"`   // the greedy continuation (an early stop id ends it)
	Suffix      []int32 `json:"suffix"` // the true continuation
	Exact       bool    `json:"exact"`
	TokenMatch  float64 `json:"token_match"`
	PrefixMatch int     `json:"prefix_match"`
	RougeLIDs   float64 `json:"rougeL_tokens"`          // F1 over token ids
	RougeLText  float64 `json:"rougeL_words,omitempty"` // F1 over decoded words, when a decoder is given
}

// ExtractOptions control Extract.
type ExtractOptions struct {
	Batch   int                  // probes decoded together (default 8)
	StopIDs []int32              // an early stop (EOS) ends a continuation
	Decode  func([]int32) string // turns ids into text for word-level ROUGE-L; nil skips it
}

// Extract decodes every probe greedily for as many tokens as its suffix
// and scores the continuation against the suffix.
func Extract(m *llama.Model, probes []Probe, opt ExtractOptions) ([]Result, error) {
	if opt.Batch <= 0 {
		opt.Batch = 8
	}
	out := make([]Result, 0, len(probes))
	for i := 0; i < len(probes); {
		// A batch shares one continuation length.
		j := i + 1
		for j < len(probes) && j-i < opt.Batch && len(probes[j].Suffix) == len(probes[i].Suffix) {
			j++
		}
		prompts := make([][]int32, j-i)
		for k := range prompts {
			prompts[k] = probes[i+k].Prefix
		}
		gen, err := m.Generate(prompts, llama.GenerateOptions{MaxNewTokens: len(probes[i].Suffix), StopIDs: opt.StopIDs})
		if err != nil {
			return nil, fmt.Errorf("memorization: document %d: %w", probes[i].Doc, err)
		}
		for k, pred := range gen {
			p := probes[i+k]
			r := Result{Doc: p.Doc, K: p.K, Pred: pred, Suffix: p.Suffix,
				Exact: ExactMatch(pred, p.Suffix), TokenMatch: TokenMatch(pred, p.Suffix), PrefixMatch: PrefixMatch(pred, p.Suffix)}
			_, _, r.RougeLIDs = RougeLIDs(pred, p.Suffix)
			if opt.Decode != nil {
				_, _, r.RougeLText = RougeLText(opt.Decode(pred), opt.Decode(p.Suffix))
			}
			out = append(out, r)
		}
		i = j
	}
	return out, nil
}
