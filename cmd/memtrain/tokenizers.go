package main

import (
	"errors"

	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/data/tokenizer"
)

const tokenizerFlagHelp = "tokenizer: a tokenizer.json, a folder holding one (e.g. a checkpoint), or builtin:llama2 / builtin:llama3 for the bundled Meta tokenizers"

// openTokenizer loads the tokenizer named by a --tokenizer flag (see
// data.OpenTokenizer) and returns it with its files.
func openTokenizer(spec string) (*tokenizer.Tokenizer, map[string][]byte, error) {
	if spec == "" {
		return nil, nil, errors.New("no tokenizer given (use --tokenizer)")
	}
	return data.OpenTokenizer(spec)
}
