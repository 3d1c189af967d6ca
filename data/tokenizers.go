package data

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/memtrain/memtrain/data/assets"
	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/internal/inputfile"
)

// builtinTokenizers maps builtin:NAME to the embedded tokenizer.json and
// tokenizer_config.json.
var builtinTokenizers = map[string][2]string{
	"llama2": {assets.Llama2Tokenizer, assets.Llama2TokenizerConfig},
	"llama3": {assets.Llama3Tokenizer, assets.Llama3TokenizerConfig},
}

// OpenTokenizer loads the tokenizer named by spec — a tokenizer.json, a
// folder holding one (e.g. a checkpoint), or builtin:llama2 /
// builtin:llama3 for the embedded Meta tokenizers — and returns it with its
// files: tokenizer.json and, when present, tokenizer_config.json, keyed by
// those names (tokenizer.FileName, tokenizer.ConfigFileName), so that a
// checkpoint written with it can carry them.
func OpenTokenizer(spec string) (*tokenizer.Tokenizer, map[string][]byte, error) {
	name, files, err := tokenizerFiles(spec)
	if err != nil {
		return nil, nil, err
	}
	tok, err := tokenizer.Parse(name, files[tokenizer.FileName], files[tokenizer.ConfigFileName])
	if err != nil {
		return nil, nil, err
	}
	return tok, files, nil
}

// tokenizerFiles reads the files of the tokenizer named by spec and
// returns them with the name to parse them under.
func tokenizerFiles(spec string) (name string, files map[string][]byte, err error) {
	if spec == "" {
		return "", nil, errors.New("data: no tokenizer given")
	}
	files = map[string][]byte{}
	if name, ok := strings.CutPrefix(spec, "builtin:"); ok {
		pair, ok := builtinTokenizers[name]
		if !ok {
			return "", nil, fmt.Errorf("unknown builtin tokenizer %q (want builtin:llama2 or builtin:llama3)", name)
		}
		for i, file := range []string{tokenizer.FileName, tokenizer.ConfigFileName} {
			b, err := assets.Read(pair[i])
			if err != nil {
				return "", nil, err
			}
			files[file] = b
		}
		return spec, files, nil
	}
	path := spec
	if st, err := os.Stat(path); err != nil {
		return "", nil, fmt.Errorf("tokenizer: %w", err)
	} else if st.IsDir() {
		path = filepath.Join(path, tokenizer.FileName)
	}
	b, err := inputfile.ReadFile(path)
	if err != nil {
		return "", nil, fmt.Errorf("tokenizer: %w", err)
	}
	files[tokenizer.FileName] = b
	cfgPath := filepath.Join(filepath.Dir(path), tokenizer.ConfigFileName)
	if b, err := inputfile.ReadFile(cfgPath); err == nil {
		files[tokenizer.ConfigFileName] = b
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", nil, fmt.Errorf("tokenizer: %w", err)
	}
	return path, files, nil
}
