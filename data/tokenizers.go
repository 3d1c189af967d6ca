package data

import (
	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/data/assets"
	"github.com/memtrain/memtrain/data/tokenizer"
)

// OpenTokenizer loads the tokenizer named by spec (a tokenizer.json, a
// folder holding one, or builtin:llama2 / builtin:llama3) and returns it
// with its files (see assets.TokenizerFiles).
func OpenTokenizer(spec string) (*tokenizer.Tokenizer, map[string][]byte, error) {
	name, files, err := assets.TokenizerFiles(spec)
	if err != nil {
		return nil, nil, err
	}
	tok, err := tokenizer.Parse(name, files[checkpoints.TokenizerFile], files[checkpoints.TokenizerConfigFile])
	if err != nil {
		return nil, nil, err
	}
	return tok, files, nil
}
