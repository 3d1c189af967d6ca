package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/data/assets"
	"github.com/memtrain/memtrain/data/tokenizer"
)

const tokenizerFlagHelp = "tokenizer: a tokenizer.json, a folder holding one (e.g. a checkpoint), or builtin:llama2 / builtin:llama3 for the bundled Meta tokenizers"

// builtinTokenizers maps builtin:NAME to the embedded tokenizer files.
var builtinTokenizers = map[string][2]string{
	"llama2": {assets.Llama2Tokenizer, assets.Llama2TokenizerConfig},
	"llama3": {assets.Llama3Tokenizer, assets.Llama3TokenizerConfig},
}

// openTokenizer loads the tokenizer named by spec and returns, with it, the
// raw files (tokenizer.json and, when present, tokenizer_config.json) so
// that a checkpoint written with it can carry them.
func openTokenizer(spec string) (*tokenizer.Tokenizer, map[string][]byte, error) {
	if spec == "" {
		return nil, nil, errors.New("no tokenizer given (use --tokenizer)")
	}
	files := map[string][]byte{}
	if name, ok := strings.CutPrefix(spec, "builtin:"); ok {
		pair, ok := builtinTokenizers[name]
		if !ok {
			return nil, nil, fmt.Errorf("unknown builtin tokenizer %q (want builtin:llama2 or builtin:llama3)", name)
		}
		for i, file := range []string{checkpoints.TokenizerFile, checkpoints.TokenizerConfigFile} {
			b, err := assets.Read(pair[i])
			if err != nil {
				return nil, nil, err
			}
			files[file] = b
		}
	} else {
		path := spec
		if st, err := os.Stat(path); err != nil {
			return nil, nil, fmt.Errorf("tokenizer: %w", err)
		} else if st.IsDir() {
			path = filepath.Join(path, checkpoints.TokenizerFile)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, fmt.Errorf("tokenizer: %w", err)
		}
		files[checkpoints.TokenizerFile] = b
		cfgPath := filepath.Join(filepath.Dir(path), checkpoints.TokenizerConfigFile)
		if b, err := os.ReadFile(cfgPath); err == nil {
			files[checkpoints.TokenizerConfigFile] = b
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("tokenizer: %w", err)
		}
		spec = path
	}
	tok, err := tokenizer.Parse(spec, files[checkpoints.TokenizerFile], files[checkpoints.TokenizerConfigFile])
	if err != nil {
		return nil, nil, err
	}
	return tok, files, nil
}
