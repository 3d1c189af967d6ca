package finetune

import (
	"fmt"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
)

// A Loaded is a checkpoint's model on a backend, with the tokenizer its
// folder holds (nil when it has none).
type Loaded struct {
	Model     *llama.Model
	Tokenizer *tokenizer.Tokenizer
	Dir       string
}

// LoadWithTokenizer opens the model of ref on backend b (LoadModel: the
// whole model, or with opt.Parallel this rank's shards of it, its LoRA
// adapter on top) and the tokenizer of its folder; needTokenizer makes a
// folder without one a NoTokenizerError.
func LoadWithTokenizer(b engine.Backend, ref ModelRef, opt llama.Options, needTokenizer bool) (*Loaded, error) {
	lm := &Loaded{Dir: ref.Dir}
	if path := checkpoints.TokenizerPathIn(ref.Dir); path != "" {
		var err error
		if lm.Tokenizer, _, err = data.OpenTokenizer(path); err != nil {
			return nil, err
		}
	} else if needTokenizer {
		return nil, NoTokenizerError(ref.Dir)
	}
	var err error
	if lm.Model, err = LoadModel(b, ref, opt); err != nil {
		return nil, err
	}
	return lm, nil
}

// A NoTokenizerError names a checkpoint folder without the tokenizer that
// reading text needs.
type NoTokenizerError string

func (e NoTokenizerError) Error() string {
	return string(e) + ": no tokenizer.json in the checkpoint folder (needed to read text; give token ids instead)"
}

// SameTokenizer refuses a reference model whose tokenizer differs from
// m's: the same vocabulary size, and the same tokenizer.json where both
// have one.
func (m *Loaded) SameTokenizer(ref *Loaded) error {
	if a, b := m.Model.Config.VocabSize, ref.Model.Config.VocabSize; a != b {
		return fmt.Errorf("vocabulary of %d tokens, the model's %d: want the same tokenizer", b, a)
	}
	if m.Tokenizer != nil && ref.Tokenizer != nil && m.Tokenizer.Hash() != ref.Tokenizer.Hash() {
		return fmt.Errorf("tokenizer.json differs from the model's (sha256 %.12s…, %.12s…): want the same tokenizer", ref.Tokenizer.Hash(), m.Tokenizer.Hash())
	}
	return nil
}
